"""First-start PKI: a CA, the serving certificate, and a client certificate per identity, all in the data
dir: the administrator (system:masters), the scheduler (system:kube-scheduler), the controller manager
(system:kube-controller-manager) and the server's own kubelet client (kube-apiserver-kubelet-client,
which RBAC lets use the kubelet API only), as kubeadm issues them.

EC P-256 keys because they are generated in milliseconds (tests start many servers) and every client we
must serve (Go's crypto/tls, Python's ssl) accepts them. Key files are written 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
from base64 import b64encode
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = dt.timedelta(days=3650)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    kubelet_client_cert: Path  # the server's own identity towards node agents (pods/log)
    kubelet_client_key: Path
    scheduler_cert: Path
    scheduler_key: Path
    controller_manager_cert: Path
    controller_manager_key: Path
    # The aggregation layer's (kubeadm's front-proxy-ca and front-proxy-client): the server presents the
    # client certificate to extension API servers, who trust the CA for its X-Remote-* headers.
    front_proxy_ca_cert: Path | None = None
    front_proxy_ca_key: Path | None = None
    front_proxy_client_cert: Path | None = None
    front_proxy_client_key: Path | None = None


KUBELET_CLIENT = "kube-apiserver-kubelet-client"
SCHEDULER_USER = "system:kube-scheduler"
CONTROLLER_MANAGER_USER = "system:kube-controller-manager"
FRONT_PROXY_CLIENT = "front-proxy-client"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    usages: list[x509.ObjectIdentifier] | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        ).add_extension(
            # as kubeadm's: OpenSSL 3's strict chain checks (Python 3.13's default) want it on every leaf
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def issue_client_cert(pki: Pki, user: str, groups: tuple[str, ...], cert: Path, key: Path) -> None:
    """Sign a client certificate with the cluster CA (CN = user, O = groups)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    new_key = ec.generate_private_key(ec.SECP256R1())
    signed = _issue(
        _name(user, groups), new_key, ca_cert.subject, ca_key, usages=[ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    _write_key(key, new_key)
    _write_cert(cert, signed)


def ensure_pki(data_dir: Path, extra_sans: list[str] | None = None) -> Pki:
    """Create whatever part of the PKI is missing; existing files are kept across restarts."""
    pki_dir = data_dir / "pki"
    pki_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(pki_dir, 0o700)
    pki = Pki(
        pki_dir / "ca.crt",
        pki_dir / "ca.key",
        pki_dir / "apiserver.crt",
        pki_dir / "apiserver.key",
        pki_dir / "admin.crt",
        pki_dir / "admin.key",
        pki_dir / "apiserver-kubelet-client.crt",
        pki_dir / "apiserver-kubelet-client.key",
        pki_dir / "kube-scheduler.crt",
        pki_dir / "kube-scheduler.key",
        pki_dir / "kube-controller-manager.crt",
        pki_dir / "kube-controller-manager.key",
        pki_dir / "front-proxy-ca.crt",
        pki_dir / "front-proxy-ca.key",
        pki_dir / "front-proxy-client.crt",
        pki_dir / "front-proxy-client.key",
    )
    if not (pki.ca_cert.exists() and pki.ca_key.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("pykubelet-ca")
        _write_key(pki.ca_key, ca_key)
        _write_cert(pki.ca_cert, _issue(ca_name, ca_key, ca_name, ca_key, ca=True))
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    if not (pki.serving_cert.exists() and pki.serving_key.exists()):
        key = ec.generate_private_key(ec.SECP256R1())
        names = {
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            socket.gethostname(),
        }
        ips = {"127.0.0.1", "::1", "10.96.0.1"}
        for extra in extra_sans or []:
            try:
                ipaddress.ip_address(extra)
                ips.add(extra)
            except ValueError:
                names.add(extra)
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in sorted(names)]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in sorted(ips)]
        cert = _issue(
            _name("kube-apiserver"),
            key,
            ca_cert.subject,
            ca_key,
            usages=[ExtendedKeyUsageOID.SERVER_AUTH],
            sans=sans,
        )
        _write_key(pki.serving_key, key)
        _write_cert(pki.serving_cert, cert)
    if not (pki.admin_cert.exists() and pki.admin_key.exists()):
        issue_client_cert(pki, "kubernetes-admin", ("system:masters",), pki.admin_cert, pki.admin_key)
    # kubeadm's names. The kubelet client is no administrator: a ClusterRoleBinding gives it
    # system:kubelet-api-admin. One issued by an older server (O=system:masters) is replaced.
    identities = (
        (KUBELET_CLIENT, pki.kubelet_client_cert, pki.kubelet_client_key),
        (SCHEDULER_USER, pki.scheduler_cert, pki.scheduler_key),
        (CONTROLLER_MANAGER_USER, pki.controller_manager_cert, pki.controller_manager_key),
    )
    for user, cert, key in identities:
        if not (cert.exists() and key.exists()) or _organizations(cert):
            issue_client_cert(pki, user, (), cert, key)
    _ensure_front_proxy(pki)
    return pki


def _ensure_front_proxy(pki: Pki) -> None:
    """A CA of its own for the aggregation layer (never the cluster CA: a certificate it signs lets its
    holder assert any user in X-Remote-User), and the one client certificate it signs."""
    assert pki.front_proxy_ca_cert and pki.front_proxy_ca_key
    assert pki.front_proxy_client_cert and pki.front_proxy_client_key
    if not (pki.front_proxy_ca_cert.exists() and pki.front_proxy_ca_key.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("front-proxy-ca")
        _write_key(pki.front_proxy_ca_key, ca_key)
        _write_cert(pki.front_proxy_ca_cert, _issue(ca_name, ca_key, ca_name, ca_key, ca=True))
        pki.front_proxy_client_cert.unlink(missing_ok=True)
    if pki.front_proxy_client_cert.exists() and pki.front_proxy_client_key.exists():
        return
    ca_key = serialization.load_pem_private_key(pki.front_proxy_ca_key.read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    ca_cert = x509.load_pem_x509_certificate(pki.front_proxy_ca_cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(
        _name(FRONT_PROXY_CLIENT), key, ca_cert.subject, ca_key, usages=[ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    _write_key(pki.front_proxy_client_key, key)
    _write_cert(pki.front_proxy_client_cert, cert)


def _organizations(cert: Path) -> list[str]:
    subject = x509.load_pem_x509_certificate(cert.read_bytes()).subject
    return [str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]


def write_kubeconfig(
    path: Path, server: str, pki: Pki, cert: Path, key: Path, user: str = "admin", extra_ca: bytes = b""
) -> None:
    """A kubeconfig with the CA (and `extra_ca`, more CA certificates to trust) and client credentials
    embedded, so it can be copied anywhere."""

    def b64(p: Path) -> str:
        return b64encode(p.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "pykubelet",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": b64encode(
                        pki.ca_cert.read_bytes() + (b"\n" + extra_ca if extra_ca else b"")
                    ).decode(),
                },
            }
        ],
        "users": [
            {"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}
        ],
        "contexts": [{"name": f"{user}@pykubelet", "context": {"cluster": "pykubelet", "user": user}}],
        "current-context": f"{user}@pykubelet",
        "preferences": {},
    }
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    os.replace(tmp, path)
