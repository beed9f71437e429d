"""Where the API server is and how to prove who we are: kubeconfig files and in-cluster config.

Supports what the kubeconfigs of kubeadm, kind, our own API server and the clouds hold: a server URL, a
CA (file or inline data, or insecure-skip-tls-verify), client certificates (file or inline), a bearer
token (inline or tokenFile, re-read on every request since projected tokens rotate), basic auth, and
`exec` credential plugins (`execcredential.py`: EKS, GKE, AKS, OIDC). Several files ($KUBECONFIG's
list) merge as kubectl merges them, relative paths against each file's folder (`kubeconfigfiles.py`). Inside a pod, the service account's token and
CA (`in_cluster_config`).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeclient.execcredential import ExecAuthenticator, ExecConfig, ExecError, cluster_info
from kubeclient.kubeconfigfiles import KubeconfigError, kubeconfig_paths, read_kubeconfigs

IN_CLUSTER_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A cluster entry's extension naming more replicas of its API server (`servers: [url, ...]`), for clients
# that fail over (KubeClient); kubectl ignores extensions and keeps to `server`.
SERVERS_EXTENSION = "pykubelet.io/servers"


class ConfigError(Exception):
    """The kubeconfig cannot be used (missing context, cluster, or unreadable credentials)."""


@dataclass
class ClusterConfig:
    server: str
    ca_file: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    client_cert_data: bytes | None = None
    client_key_data: bytes | None = None
    token: str | None = None
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    # Other replicas of the same API server (same CA, same credentials), tried in order when `server`
    # cannot be reached. A kubeconfig holds one server; the list comes from the constructor or from the
    # cluster's SERVERS_EXTENSION.
    servers: tuple[str, ...] = ()
    exec: ExecAuthenticator | None = field(default=None, repr=False)  # a kubeconfig `exec` plugin
    namespace: str | None = None  # the kubeconfig context's namespace

    @property
    def all_servers(self) -> tuple[str, ...]:
        """`server` first, then the other replicas, each once."""
        return tuple(dict.fromkeys((self.server, *self.servers)))

    def __repr__(self) -> str:  # never show credentials in logs
        return f"ClusterConfig(server={self.server!r}, auth={self.auth_kind()})"

    def auth_kind(self) -> str:
        if self.client_cert_data:
            return "client-certificate"
        if self.exec is not None:
            return "exec"
        if self.token or self.token_file:
            return "token"
        if self.username:
            return "basic"
        return "anonymous"

    def bearer_token(self) -> str | None:
        """The token, re-read from tokenFile each time (projected tokens rotate)."""
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip()
            except OSError:
                return self.token
        return self.token

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS client context, or None for plain HTTP. A bare context when the kubeconfig names its
        CA: loading the system trust store costs about 0.1 s and is of no use then."""
        if not self.server.startswith("https://"):
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_data:
            ctx.load_verify_locations(cadata=self.ca_data.decode())
        elif self.ca_file:
            ctx.load_verify_locations(cafile=self.ca_file)
        else:
            ctx.load_default_certs()
        if self.client_cert_data and self.client_key_data:
            load_client_certificate(ctx, self.client_cert_data, self.client_key_data)
        return ctx


def load_client_certificate(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a client certificate held in memory: ssl wants files, so both go to a private temporary
    folder, are loaded, and are removed at once."""
    with tempfile.TemporaryDirectory(prefix="kubeclient-cred-") as tmp:
        cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(str(cert), str(key))


def _read_data_or_file(entry: dict[str, Any], key: str) -> bytes | None:
    """Inline `<key>-data`, else the file `<key>` names (already absolute: kubeconfigfiles resolved it)."""
    data = entry.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    path = entry.get(key)
    if path:
        try:
            return Path(path).read_bytes()
        except OSError as err:
            raise ConfigError(f"cannot read {key} {path}: {err.strerror}") from None
    return None


def _named(items: dict[str, dict[str, Any]], name: str, kind: str) -> dict[str, Any]:
    if name not in items:
        raise ConfigError(f"kubeconfig has no {kind} named {name!r}")
    return items[name]


def load_kubeconfig(path: str | os.PathLike[str] | None = None, context: str | None = None) -> ClusterConfig:
    """The client config of `context` (default: the current one) from the kubeconfig files `path` names
    (one file, or a list as $KUBECONFIG holds; None: $KUBECONFIG, else ~/.kube/config), merged as
    kubectl merges them."""
    try:
        merged = read_kubeconfigs(kubeconfig_paths(path))
    except KubeconfigError as err:
        raise ConfigError(str(err)) from None
    where = merged.describe()
    ctx_name = context or merged.current_context
    if not ctx_name:
        if len(merged.contexts) != 1:
            raise ConfigError(f"kubeconfig {where} has no current-context")
        ctx_name = next(iter(merged.contexts))
    ctx = _named(merged.contexts, ctx_name, "context")
    cluster = _named(merged.clusters, ctx.get("cluster", ""), "cluster")
    user_name = ctx.get("user") or ""
    user = _named(merged.users, user_name, "user") if user_name else {}
    server = cluster.get("server")
    if not server:
        raise ConfigError(f"cluster {ctx.get('cluster')!r} in {where} has no server")
    ca_data = _read_data_or_file(cluster, "certificate-authority")
    return ClusterConfig(
        server=server.rstrip("/"),
        ca_data=ca_data,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        client_cert_data=_read_data_or_file(user, "client-certificate"),
        client_key_data=_read_data_or_file(user, "client-key"),
        token=user.get("token"),
        token_file=user.get("tokenFile") or None,
        username=user.get("username"),
        password=user.get("password"),
        servers=_replicas(cluster, where),
        exec=_exec(user, user_name, cluster, ca_data),
        namespace=ctx.get("namespace") or None,
    )


def _exec(
    user: dict[str, Any], name: str, cluster: dict[str, Any], ca_data: bytes | None
) -> ExecAuthenticator | None:
    stanza = user.get("exec")
    if not stanza:
        return None
    try:
        config = ExecConfig.parse(stanza, name)
    except ExecError as err:
        raise ConfigError(str(err)) from None
    return ExecAuthenticator(config, cluster_info(cluster, ca_data) if config.provide_cluster_info else {})


def _replicas(cluster: dict[str, Any], file: str) -> tuple[str, ...]:
    for extension in cluster.get("extensions") or []:
        if isinstance(extension, dict) and extension.get("name") == SERVERS_EXTENSION:
            servers = (extension.get("extension") or {}).get("servers") or []
            if not isinstance(servers, list) or not all(
                isinstance(s, str) and s.startswith(("https://", "http://")) for s in servers
            ):
                raise ConfigError(f"kubeconfig {file}: extension {SERVERS_EXTENSION}: servers must be URLs")
            return tuple(s.rstrip("/") for s in servers)
    return ()


def in_cluster_config(secrets_dir: Path = IN_CLUSTER_DIR, env: dict[str, str] | None = None) -> ClusterConfig:
    env = dict(os.environ if env is None else env)
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set")
    if ":" in host:
        host = f"[{host}]"
    token_file = secrets_dir / "token"
    if not token_file.exists():
        raise ConfigError(f"not in a cluster: {token_file} is missing")
    ca = secrets_dir / "ca.crt"
    return ClusterConfig(
        server=f"https://{host}:{port}",
        ca_file=str(ca) if ca.exists() else None,
        token_file=str(token_file),
    )


def load_config(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """The kubeconfig if one is named (or $KUBECONFIG's list, merged), else the in-cluster config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return load_kubeconfig(path, context)
    return in_cluster_config()
