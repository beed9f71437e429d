"""A local etcd (Debian's etcd-server, 3.4) for tests, benchmarks and `pykubelet up --store etcd`.

One member on 127.0.0.1 with its own data dir and its own PKI, made here as kubeadm makes etcd's: a CA
(`pki/ca.crt`), a serving certificate for 127.0.0.1/localhost, and the API server's client certificate
(`pki/apiserver-etcd-client.crt`, CN kube-apiserver-etcd-client). Clients must present a certificate
from that CA (`--client-cert-auth`), as in a kubeadm cluster. Started and stopped through the rig's
Daemon (SIGTERM, then SIGKILL of the group); `remove()` deletes the state dir.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubelet.rig.process import Daemon, free_port

ETCD_BINARY = "/usr/bin/etcd"
CLIENT_CN = "kube-apiserver-etcd-client"


@dataclass(frozen=True)
class EtcdPki:
    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey | None, cert: x509.Certificate | None) -> None:
    if key is not None:
        data = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _sign(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    ca: tuple[x509.Name, ec.EllipticCurvePrivateKey],
    usages: list[x509.ObjectIdentifier] | None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca[0])
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=usages is None, path_length=None), critical=True)
    )
    if usages is None:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca[1], hashes.SHA256())


def make_pki(pki_dir: Path) -> EtcdPki:
    """etcd's CA, serving and client certificates under pki_dir (made once, kept on restart)."""
    pki = EtcdPki(
        pki_dir / "ca.crt",
        pki_dir / "server.crt",
        pki_dir / "server.key",
        pki_dir / "apiserver-etcd-client.crt",
        pki_dir / "apiserver-etcd-client.key",
    )
    if pki.client_key.exists():
        return pki
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (_name("etcd-ca"), ca_key)
    _write(pki_dir / "ca.key", ca_key, None)
    _write(pki.ca_cert, None, _sign("etcd-ca", ca_key, ca, None))
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    _write(pki.server_key, server_key, None)
    _write(pki.server_cert, None, _sign("etcd-server", server_key, ca, usages, sans))
    client_key = ec.generate_private_key(ec.SECP256R1())
    _write(pki.client_cert, None, _sign(CLIENT_CN, client_key, ca, [ExtendedKeyUsageOID.CLIENT_AUTH]))
    _write(pki.client_key, client_key, None)
    return pki


class Etcd:
    """`with Etcd(dir) as etcd:` -> etcd.url (https://127.0.0.1:PORT), etcd.server_args() for the API server."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        max_request_bytes: int | None = None,
        progress_notify_interval: str = "",
    ) -> None:
        self.state_dir = Path(state_dir)
        self.port = port or free_port()
        self.peer_port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.pki = make_pki(self.state_dir / "pki")
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            ETCD_BINARY,
            "--name",
            "default",
            "--data-dir",
            str(self.state_dir / "data"),
            "--listen-client-urls",
            self.url,
            "--advertise-client-urls",
            self.url,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"default={peer}",
            "--initial-cluster-state",
            "new",
            "--cert-file",
            str(self.pki.server_cert),
            "--key-file",
            str(self.pki.server_key),
            "--trusted-ca-file",
            str(self.pki.ca_cert),
            "--client-cert-auth",
            "--logger",
            "zap",
            "--log-outputs",
            "stderr",
            "--log-level",
            "warn",
        ]
        if max_request_bytes:
            argv += ["--max-request-bytes", str(max_request_bytes)]
        if progress_notify_interval:
            argv += ["--experimental-watch-progress-notify-interval", progress_notify_interval]
        self.daemon = Daemon("etcd", argv, self.state_dir / "etcd.log")

    def server_args(self) -> list[str]:
        """`pykubelet server`'s flags for this etcd, with the API server's client certificate."""
        return [
            "--etcd-servers",
            self.url,
            "--etcd-cafile",
            str(self.pki.ca_cert),
            "--etcd-certfile",
            str(self.pki.client_cert),
            "--etcd-keyfile",
            str(self.pki.client_key),
        ]

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(self.pki.client_cert, self.pki.client_key)
        return context

    def _ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/health", context=self.ssl_context(), timeout=2) as resp:
            return resp.status == 200

    @property
    def pid(self) -> int | None:
        return self.daemon.pid

    @property
    def running(self) -> bool:
        return self.daemon.running()

    def start(self, timeout: float = 30.0) -> Etcd:
        if not self.running:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.daemon.start(self._ready, timeout=timeout)
        return self

    def stop(self, grace: float = 10.0) -> None:
        self.daemon.stop(grace=grace)

    def kill(self) -> None:
        self.daemon.kill()

    def remove(self) -> None:
        """Stop and delete the data dir and PKI."""
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> Etcd:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
