"""Start and stop the project's API server as a subprocess (tests, benchmarks and `pykubelet up`).

One owner (a rig Daemon) starts it, waits until /readyz answers, and stops its whole process group, so no
test leaves a server (or its scheduler child) behind. The server writes DIR/admin.kubeconfig (system:masters),
DIR/scheduler.conf and DIR/controller-manager.conf (the components' own identities) on every start;
`client_kubeconfig` issues any other identity (a node's, a user's) from the cluster CA.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from kubeclient.config import SERVERS_EXTENSION
from kubeclient.tlsverify import go_compatible
from pykubelet.rig.process import Daemon, free_port

if TYPE_CHECKING:
    from collections.abc import Callable

    from kubernetes.client import ApiClient

    from pykubelet.rig.etcd import Etcd, EtcdCluster


def api_client(kubeconfig: str | os.PathLike[str]) -> ApiClient:
    """An official-client ApiClient for a kubeconfig (its own Configuration, not the global default)."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


class ApiServer:
    """The API server in `data_dir` on `port` (0: a free port is chosen before start).

    The scheduler and the controller manager that `pykubelet server` supervises are off unless
    `scheduler=True` / `controllers=True`: most tests bind pods themselves or run the loop under test
    on their own, and a supervised one would race them.

    Without the controller manager no namespace gets its `default` ServiceAccount, so the ServiceAccount
    admission plugin would refuse every pod: it is off unless `service_account_admission=True` (default:
    on exactly when the controllers run), as upstream's integration-test servers turn it off. So is
    TaintNodesByCondition (`node_taint_admission`): without the node lifecycle controller nothing lifts
    the not-ready taint it puts on every new Node, and the nodes tests make would never take a pod."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int = 0,
        *,
        scheduler: bool = False,
        controllers: bool = False,
        controller_manager_port: int | None = None,
        scheduler_port: int | None = None,
        service_account_admission: bool | None = None,
        node_taint_admission: bool | None = None,
        extra_args: list[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        etcd: Etcd | EtcdCluster | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host  # the address it binds and advertises (a replica's own loopback address)
        self.etcd = etcd  # store in this etcd (its client certificate) instead of DIR/state.db
        self.port = port or free_port()
        self.scheduler = scheduler
        self.controllers = controllers
        self.controller_manager_port = controller_manager_port or (free_port() if controllers else 0)
        self.scheduler_port = scheduler_port or (free_port() if scheduler else 0)
        self.extra_args = list(extra_args or []) + (etcd.server_args() if etcd is not None else [])
        if host != "127.0.0.1":
            self.extra_args += ["--bind-address", host]
        disabled = []
        if not (controllers if service_account_admission is None else service_account_admission):
            disabled.append("ServiceAccount")
        if not (controllers if node_taint_admission is None else node_taint_admission):
            disabled.append("TaintNodesByCondition")
        if disabled:
            self.extra_args += ["--disable-admission-plugins", ",".join(disabled)]
        self.log_path = Path(log_path) if log_path else self.data_dir / "apiserver.log"
        self.daemon = Daemon("pykubelet server", self.command(), self.log_path)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pykubelet",
            "server",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            f"--scheduler={str(self.scheduler).lower()}",
            f"--controllers={str(self.controllers).lower()}",
            "--controller-manager-port",
            str(self.controller_manager_port),
            "--scheduler-port",
            str(self.scheduler_port),
            *self.extra_args,
        ]

    @property
    def kubeconfig(self) -> Path:
        """The administrator's (system:masters)."""
        return self.data_dir / "admin.kubeconfig"

    @property
    def scheduler_kubeconfig(self) -> Path:
        """The scheduler's own identity (system:kube-scheduler), written by the server on every start."""
        return self.data_dir / "scheduler.conf"

    @property
    def controller_manager_kubeconfig(self) -> Path:
        """The controller manager's own identity (system:kube-controller-manager)."""
        return self.data_dir / "controller-manager.conf"

    @property
    def signing_pair(self) -> tuple[bytes, bytes]:
        """The cluster CA's certificate and key (PEM): what kubeadm hands the controller manager to sign with."""
        return self.ca_cert.read_bytes(), self.ca_key.read_bytes()

    def api_client(self) -> ApiClient:
        """The official client as the cluster admin (a context manager: `with server.api_client() as api`)."""
        return api_client(self.kubeconfig)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_cert(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """The cluster CA's key: what the controller managers sign their controllers' credentials with."""
        return self.data_dir / "pki" / "ca.key"

    @property
    def pid(self) -> int | None:
        return self.daemon.pid

    def start(self, timeout: float = 60.0) -> ApiServer:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.daemon.start(self._ready, timeout=timeout)
        return self

    def _ready(self) -> bool:
        context = go_compatible(ssl.create_default_context())
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
            return resp.status == 200 and self.kubeconfig.exists()

    def client_kubeconfig(self, user: str, groups: tuple[str, ...], path: str | os.PathLike[str]) -> Path:
        """A kubeconfig for another identity, with a client certificate from the cluster CA.

        e.g. `client_kubeconfig("system:node:n1", ("system:nodes",), dir / "kubelet.kubeconfig")` for a node
        agent. The server must have started once (the CA exists).
        """
        from controlplane.apiserver.certs import ensure_pki, issue_client_cert, write_kubeconfig

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        pki = ensure_pki(self.data_dir)
        safe = user.replace(":", "_").replace("/", "_")
        cert, key = target.parent / f"{safe}.crt", target.parent / f"{safe}.key"
        issue_client_cert(pki, user, groups, cert, key)
        write_kubeconfig(target, self.url, pki, cert, key, user=safe)
        return target

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (the server stops its scheduler child), then SIGKILL of the group after `timeout`."""
        self.daemon.stop(grace=timeout)

    def kill(self) -> None:
        """SIGKILL without warning: what a crash looks like to the store."""
        self.daemon.kill()

    @property
    def running(self) -> bool:
        return self.daemon.running()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def replica_host(index: int) -> str:
    """Replica i's own loopback address: 127.0.0.1, 127.0.0.2, ... (all of 127/8 reaches `lo` on Linux
    with no setup), so every replica serves the same port, as the `kubernetes` Endpoints need."""
    return f"127.0.0.{index + 1}"


def write_failover_kubeconfig(source: Path, target: Path, urls: list[str]) -> Path:
    """A copy of `source` whose cluster also names every replica (kubeclient's failover list, in an
    extension kubectl ignores; kubectl itself keeps to `server`)."""
    import yaml

    config = yaml.safe_load(source.read_text())
    for entry in config.get("clusters") or []:
        cluster = entry["cluster"]
        others = [u for u in urls if u != cluster["server"]]
        cluster["extensions"] = [{"name": SERVERS_EXTENSION, "extension": {"servers": others}}]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    os.chmod(target, 0o600)
    return target


class ApiServerReplicas:
    """`count` API servers on one etcd, as kubeadm's stacked control plane runs them: one CA and one
    service-account key pair (made once, copied to every replica's data dir, as `kubeadm join
    --control-plane` copies them), each replica on its own loopback address and the same port.

    `with ApiServerReplicas(root, 2, etcd) as group:` -> group.servers, group.urls, group.kubeconfig
    (the first replica's admin kubeconfig, naming the others for kubeclient's failover)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        count: int,
        etcd: Etcd | EtcdCluster,
        *,
        port: int = 0,
        data_dirs: list[Path] | None = None,
        extra_args: list[str] | None = None,
        per_server_args: Callable[[Path], list[str]] | None = None,
        **kwargs: object,
    ) -> None:
        if count < 1:
            raise ValueError("at least one API server")
        self.root = Path(root)
        self.port = port or free_port()
        hosts = [replica_host(i) for i in range(count)]
        dirs = data_dirs or [self.root / f"apiserver-{i}" for i in range(count)]
        self.servers = [
            ApiServer(
                dirs[i],
                self.port,
                etcd=etcd,
                host=host,
                extra_args=[arg for h in hosts for arg in ("--tls-san", h)]
                + list(extra_args or [])
                + (per_server_args(dirs[i]) if per_server_args else []),
                **kwargs,  # type: ignore[arg-type]
            )
            for i, host in enumerate(hosts)
        ]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    @property
    def kubeconfig(self) -> Path:
        return self.root / "admin.kubeconfig"

    def share_pki(self) -> None:
        """The first replica's PKI (every replica's address in its serving certificate) and service-account
        keys, copied into the others' data dirs before they first start."""
        import shutil

        from controlplane.apiserver.certs import ensure_pki
        from controlplane.apiserver.sakeys import ensure_signing_key

        first = self.servers[0]
        sans = [s.host for s in self.servers]
        pki = ensure_pki(first.data_dir, sans)
        ensure_signing_key(pki.ca_cert.parent)
        for server in self.servers[1:]:
            if not (server.data_dir / "pki").exists():
                shutil.copytree(first.data_dir / "pki", server.data_dir / "pki")

    def start(self, timeout: float = 60.0) -> ApiServerReplicas:
        self.share_pki()
        for server in self.servers:
            server.start(timeout)
        write_failover_kubeconfig(self.servers[0].kubeconfig, self.kubeconfig, self.urls)
        return self

    def failover_kubeconfig(self, kubeconfig: Path, target: Path | None = None) -> Path:
        """Any replica's kubeconfig (a node's, a component's) made to name every replica."""
        return write_failover_kubeconfig(kubeconfig, target or kubeconfig, self.urls)

    def stop(self, timeout: float = 10.0) -> None:
        for server in self.servers:
            server.stop(timeout)

    def __enter__(self) -> ApiServerReplicas:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
