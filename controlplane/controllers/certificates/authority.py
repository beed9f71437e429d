"""Signing a request with the cluster CA (upstream's pkg/controller/certificates/authority and
csrsigning's duration rules): the subject, SANs and public key of the request, the key usages it asked
for, not a CA; valid from 5 minutes ago (backdating for clock skew) for min(expirationSeconds,
--cluster-signing-duration), at least 10 minutes, never beyond the CA's own notAfter; lifetimes of 8 h
or more lose the backdate at their end, as upstream's PermissiveSigningPolicy does.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

BACKDATE = dt.timedelta(minutes=5)
SHORT = dt.timedelta(hours=8)
MIN_DURATION = dt.timedelta(minutes=10)

_KEY_USAGES = {
    "signing": "digital_signature",
    "digital signature": "digital_signature",
    "content commitment": "content_commitment",
    "key encipherment": "key_encipherment",
    "key agreement": "key_agreement",
    "data encipherment": "data_encipherment",
    "cert sign": "key_cert_sign",
    "crl sign": "crl_sign",
    "encipher only": "encipher_only",
    "decipher only": "decipher_only",
}
_EXT_KEY_USAGES = {
    "any": ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
    "server auth": ExtendedKeyUsageOID.SERVER_AUTH,
    "client auth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "code signing": ExtendedKeyUsageOID.CODE_SIGNING,
    "email protection": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "s/mime": ExtendedKeyUsageOID.EMAIL_PROTECTION,
    "ipsec end system": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.5"),
    "ipsec tunnel": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.6"),
    "ipsec user": x509.ObjectIdentifier("1.3.6.1.5.5.7.3.7"),
    "timestamping": ExtendedKeyUsageOID.TIME_STAMPING,
    "ocsp signing": ExtendedKeyUsageOID.OCSP_SIGNING,
    "microsoft sgc": x509.ObjectIdentifier("1.3.6.1.4.1.311.10.3.3"),
    "netscape sgc": x509.ObjectIdentifier("2.16.840.1.113730.4.1"),
}


class SigningError(Exception):
    pass


def duration(expiration_seconds: int | None, cluster_ttl: dt.timedelta) -> dt.timedelta:
    """csrsigning's duration: the requested one if shorter than the cluster's, at least 10 minutes."""
    if expiration_seconds is None:
        return cluster_ttl
    requested = dt.timedelta(seconds=expiration_seconds)
    if requested > cluster_ttl:
        return cluster_ttl
    return max(requested, MIN_DURATION)


@dataclass
class CertificateAuthority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_pem, None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
            raise SigningError("the cluster signing key is not an EC, RSA or Ed25519 private key")
        return cls(x509.load_pem_x509_certificate(cert_pem), key)

    def sign(
        self,
        req: x509.CertificateSigningRequest,
        usages: list[str],
        ttl: dt.timedelta,
        now: dt.datetime | None = None,
    ) -> bytes:
        now = now or dt.datetime.now(dt.UTC)
        signer_not_after = self.cert.not_valid_after_utc
        not_before = now - BACKDATE
        not_after = now + ttl if ttl < SHORT else now + ttl - BACKDATE
        not_after = min(not_after, signer_not_after)
        if not not_before < signer_not_after:
            raise SigningError(f"the signer has expired: NotAfter={signer_not_after}")
        if not now < signer_not_after:
            raise SigningError(
                f"refusing to sign a certificate that expired in the past: NotAfter={signer_not_after}"
            )
        builder = (
            x509.CertificateBuilder()
            .subject_name(req.subject)
            .issuer_name(self.cert.subject)
            .public_key(req.public_key())  # type: ignore[arg-type]
            .serial_number(int.from_bytes(secrets.token_bytes(16), "big") >> 1)
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        flags = {name: False for name in set(_KEY_USAGES.values())}
        for usage in usages:
            if usage in _KEY_USAGES:
                flags[_KEY_USAGES[usage]] = True
        if any(flags.values()):
            builder = builder.add_extension(x509.KeyUsage(**flags), critical=True)
        ext = []
        for usage in usages:
            oid = _EXT_KEY_USAGES.get(usage)
            if oid is not None and oid not in ext:
                ext.append(oid)
        if ext:
            builder = builder.add_extension(x509.ExtendedKeyUsage(ext), critical=False)
        try:
            sans = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            builder = builder.add_extension(sans, critical=False)
        except x509.ExtensionNotFound:
            pass
        try:
            ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
            )
        except x509.ExtensionNotFound:
            pass
        algorithm = None if isinstance(self.key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
        cert = builder.sign(self.key, algorithm)
        return cert.public_bytes(serialization.Encoding.PEM)
