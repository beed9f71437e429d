"""Whether a TLS Secret's pair can be served, checked before nginx sees it: a Secret whose tls.crt is
no PEM certificate, whose tls.key is no PEM private key, or whose key does not belong to the
certificate would make `nginx -t` refuse the whole configuration, so it is refused here, for its
Ingress alone. The reasons never quote the Secret's contents."""

from __future__ import annotations

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID


def check_pair(cert_pem: bytes, key_pem: bytes) -> str | None:
    """None when the pair is usable, else why not."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return "tls.crt is not a PEM certificate"
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return "tls.key is not an unencrypted PEM private key"
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(serialization.Encoding.DER, public) != key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ):
        return "tls.key does not match the certificate in tls.crt"
    return None


def names(cert_pem: bytes) -> list[str]:
    """The DNS names a certificate is for: its subjectAltName DNS entries, else its common name."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = alt.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        found = []
    if found:
        return [n.lower() for n in found]
    return [str(a.value).lower() for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
