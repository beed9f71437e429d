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
import json
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

from kubeclient.tlsverify import go_compatible
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
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        # OpenSSL 3's strict chain checks (Python 3.13's default contexts) want the issuer's key id
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca[1].public_key()), critical=False
        )
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
        quota_backend_bytes: int | None = None,
        progress_notify_interval: str = "",
        name: str = "default",
        peer_port: int | None = None,
        initial_cluster: str = "",
        pki_dir: Path | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.name = name
        self.port = port or free_port()
        self.peer_port = peer_port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.pki = make_pki(pki_dir or self.state_dir / "pki")
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            ETCD_BINARY,
            "--name",
            name,
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
            initial_cluster or f"{name}={peer}",
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
        if quota_backend_bytes:
            argv += ["--quota-backend-bytes", str(quota_backend_bytes)]
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
        context = go_compatible(ssl.create_default_context(cafile=str(self.pki.ca_cert)))
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


class EtcdCluster:
    """`members` etcd processes on 127.0.0.1 forming one cluster, for failure tests and `up --etcd-members`:
    each member its own data dir (`<dir>/m<i>/data`) and ports, one PKI (`<dir>/pki`) whose serving
    certificate every member presents, peers over plain HTTP on localhost as the single member's are.

    `with EtcdCluster(dir, 3) as cluster:` -> cluster.members (each an `Etcd`: kill(), start()),
    cluster.urls, cluster.server_args() (every member's URL in --etcd-servers), cluster.pki."""

    def __init__(self, state_dir: str | os.PathLike[str], members: int = 3, **options: object) -> None:
        if members < 1:
            raise ValueError("an etcd cluster needs at least one member")
        self.state_dir = Path(state_dir)
        names = [f"m{i}" for i in range(members)]
        peers = self._peer_ports(names)
        initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peers, strict=True))
        self.members = [
            Etcd(
                self.state_dir / name,
                name=name,
                peer_port=peer,
                initial_cluster=initial,
                pki_dir=self.state_dir / "pki",
                **options,  # type: ignore[arg-type]
            )
            for name, peer in zip(names, peers, strict=True)
        ]
        self.pki = self.members[0].pki

    @property
    def _peers_file(self) -> Path:
        return self.state_dir / "peers.json"

    def _peer_ports(self, names: list[str]) -> list[int]:
        """The members' peer ports: those of the cluster's first start when its data is kept (etcd keeps
        its members' peer URLs in its data, and a member started on another one never meets the others:
        no quorum, so no restart and no restore of a stopped cluster), fresh ones for a new cluster."""
        try:
            known = json.loads(self._peers_file.read_text())
        except (FileNotFoundError, ValueError):
            known = {}
        if all(isinstance(known.get(n), int) for n in names) and all(
            (self.state_dir / n / "data").is_dir() for n in names
        ):
            return [known[n] for n in names]
        return [free_port() for _ in names]

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def server_args(self) -> list[str]:
        return ["--etcd-servers", self.url, *self.members[0].server_args()[2:]]

    def ssl_context(self) -> ssl.SSLContext:
        return self.members[0].ssl_context()

    @property
    def running(self) -> bool:
        return any(m.running for m in self.members)

    def start(self, timeout: float = 30.0) -> EtcdCluster:
        """Spawn every member at once (none is healthy before a quorum has met), then wait for each."""
        import time

        waiting = [m for m in self.members if not m.running]
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._peers_file.write_text(json.dumps({m.name: m.peer_port for m in self.members}))
        for member in waiting:
            member.state_dir.mkdir(parents=True, exist_ok=True)
            member.daemon.start(lambda: True, timeout=timeout)
        deadline = time.monotonic() + timeout
        for member in waiting:
            while True:
                try:
                    if member._ready():
                        break
                except OSError:
                    pass
                if not member.running:
                    raise RuntimeError(f"etcd member {member.name} exited:\n{member.daemon.log_tail()}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"etcd member {member.name} not healthy after {timeout:.0f} s")
                time.sleep(0.1)
        return self

    def _gateway(self, member: Etcd, path: str, body: dict[str, object]) -> dict[str, object]:
        """One call of etcd's JSON gateway (the v3 API over HTTPS) on `member`."""
        import json

        request = urllib.request.Request(f"{member.url}{path}", data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, context=self.ssl_context(), timeout=5) as resp:
            return json.loads(resp.read())

    def member_id(self, member: Etcd) -> str:
        return str(self._gateway(member, "/v3/maintenance/status", {})["header"]["member_id"])  # type: ignore[index]

    def leader(self) -> Etcd | None:
        """The member that leads now, or None without a quorum."""
        for member in self.members:
            if not member.running:
                continue
            try:
                status = self._gateway(member, "/v3/maintenance/status", {})
            except OSError:
                continue
            if status.get("leader") and status["leader"] == status["header"]["member_id"]:  # type: ignore[index]
                return member
        return None

    def move_leader(self, to: Etcd) -> None:
        """Hand the leadership to `to` (etcd's MoveLeader, sent to the leader), for tests that need to
        know which member leads."""
        leader = self.leader()
        if leader is None:
            raise RuntimeError("the etcd cluster has no leader")
        if leader is not to:
            self._gateway(leader, "/v3/maintenance/transfer-leadership", {"targetID": self.member_id(to)})

    def stop(self, grace: float = 10.0) -> None:
        for member in self.members:
            member.stop(grace)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def etcd_members(etcd: Etcd | EtcdCluster | None) -> list[Etcd]:
    """The processes of a single etcd or a cluster (none for None)."""
    if etcd is None:
        return []
    return list(etcd.members) if isinstance(etcd, EtcdCluster) else [etcd]
