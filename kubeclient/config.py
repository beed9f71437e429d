"""Where the API server is and how to prove who we are: kubeconfig files and in-cluster config.

Supports what the kubeconfigs of kubeadm, kind and our own API server hold: a server URL, a CA (file or
inline data, or insecure-skip-tls-verify), client certificates (file or inline), a bearer token (inline
or tokenFile, re-read on every request since projected tokens rotate) and basic auth. Relative paths are
resolved against the kubeconfig's folder, as kubectl does. Inside a pod, the service account's token and
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

import yaml

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

    @property
    def all_servers(self) -> tuple[str, ...]:
        """`server` first, then the other replicas, each once."""
        return tuple(dict.fromkeys((self.server, *self.servers)))

    def __repr__(self) -> str:  # never show credentials in logs
        return f"ClusterConfig(server={self.server!r}, auth={self.auth_kind()})"

    def auth_kind(self) -> str:
        if self.client_cert_data:
            return "client-certificate"
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
            # ssl wants files: write both to a private temporary folder, load, and remove at once.
            with tempfile.TemporaryDirectory(prefix="kubeclient-cred-") as tmp:
                cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
                for path, data in ((cert, self.client_cert_data), (key, self.client_key_data)):
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                ctx.load_cert_chain(str(cert), str(key))
        return ctx


def _read_data_or_file(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    data = entry.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    path = entry.get(key)
    if path:
        return _resolve(path, base).read_bytes()
    return None


def _resolve(path: str, base: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else base / p


def _named(items: list[dict[str, Any]] | None, name: str, kind: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(kind) or {}
    raise ConfigError(f"kubeconfig has no {kind} named {name!r}")


def load_kubeconfig(path: str | os.PathLike[str], context: str | None = None) -> ClusterConfig:
    file = Path(path)
    try:
        doc = yaml.safe_load(file.read_text()) or {}
    except OSError as err:
        raise ConfigError(f"cannot read kubeconfig {file}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"kubeconfig {file} is not YAML: {err}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"kubeconfig {file} is not a kubeconfig")
    base = file.resolve().parent
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        contexts = doc.get("contexts") or []
        if len(contexts) != 1:
            raise ConfigError(f"kubeconfig {file} has no current-context")
        ctx_name = contexts[0]["name"]
    ctx = _named(doc.get("contexts"), ctx_name, "context")
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster")
    user = _named(doc.get("users"), ctx["user"], "user") if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise ConfigError(f"cluster {ctx.get('cluster')!r} in {file} has no server")
    ca_data = _read_data_or_file(cluster, "certificate-authority", base)
    token_file = user.get("tokenFile")
    return ClusterConfig(
        server=server.rstrip("/"),
        ca_data=ca_data,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        client_cert_data=_read_data_or_file(user, "client-certificate", base),
        client_key_data=_read_data_or_file(user, "client-key", base),
        token=user.get("token"),
        token_file=str(_resolve(token_file, base)) if token_file else None,
        username=user.get("username"),
        password=user.get("password"),
        servers=_replicas(cluster, file),
    )


def _replicas(cluster: dict[str, Any], file: Path) -> tuple[str, ...]:
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
    """The kubeconfig if one is named (or $KUBECONFIG), else the in-cluster config."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return load_kubeconfig(path.split(os.pathsep)[0], context)
    return in_cluster_config()
