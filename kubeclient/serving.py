"""A component's own HTTPS endpoint: the configured certificate, or a self-signed one made once.

Every server a component runs (the kubelet API on 10250, the controller manager's and scheduler's
health and metrics ports) speaks TLS, as upstream's do. Without a configured pair, upstream's components
make a self-signed certificate in their cert dir on first start, valid for their host names and IPs;
so does `ensure_self_signed`. `server_context` optionally verifies client certificates against a CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubeclient.tlsverify import go_compatible


def ensure_self_signed(pki_dir: Path, name: str, ips: list[str], stem: str) -> tuple[Path, Path]:
    """<pki_dir>/<stem>.crt and .key, made on first call (CN `<name>@<unix time>`, as upstream)."""
    cert_path, key_path = pki_dir / f"{stem}.crt", pki_dir / f"{stem}.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    pki_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{int(now.timestamp())}")])
    sans: list[x509.GeneralName] = [x509.DNSName(name), x509.DNSName("localhost")]
    for ip in {*ips, "127.0.0.1"}:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            continue
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def server_context(cert: Path, key: Path, client_ca: str | None) -> ssl.SSLContext:
    ctx = go_compatible(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
    ctx.load_cert_chain(str(cert), str(key))
    if client_ca:
        ctx.load_verify_locations(cafile=client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL  # verified when presented; requests without one are anonymous
    return ctx


def peer_subject(ssl_object: ssl.SSLObject) -> tuple[str, tuple[str, ...]] | None:
    """The verified client certificate's CN and O values (Kubernetes' user name and groups), or None when
    the peer sent no certificate or one without a CN (upstream's x509 authenticator refuses those)."""
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    cn = ""
    orgs: list[str] = []
    for rdn in cert.get("subject", ()):
        for attr, value in rdn:
            if attr == "commonName":
                cn = value
            elif attr == "organizationName":
                orgs.append(value)
    return (cn, tuple(orgs)) if cn else None
