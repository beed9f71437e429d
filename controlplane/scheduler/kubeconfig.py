"""Reading a kubeconfig into what an HTTPS client needs: server URL, TLS context, bearer token.

Handles the forms our API server and kubeadm write: embedded (*-data) or file CA and client
certificate/key, a token or tokenFile, insecure-skip-tls-verify. Python's ssl module loads a client
certificate only from files, so embedded ones pass through a private temporary directory that is
removed straight after loading.
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Connection:
    server: str
    ssl_context: ssl.SSLContext | None
    token: str | None = None


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items or ():
        if item.get("name") == name:
            return item.get(what) or {}
    raise ValueError(f"kubeconfig has no {what} named {name!r}")


def _pem(section: dict[str, Any], key: str, base: Path) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    path = section.get(key)
    if path:
        p = Path(path)
        return (p if p.is_absolute() else base / p).read_bytes()
    return None


def load_kubeconfig(path: Path, context: str | None = None) -> Connection:
    path = Path(path)
    doc = yaml.safe_load(path.read_text()) or {}
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ValueError(f"{path}: no current-context")
    ctx = _named(doc.get("contexts") or [], ctx_name, "context")
    cluster = _named(doc.get("clusters") or [], ctx["cluster"], "cluster")
    user = _named(doc.get("users") or [], ctx["user"], "user") if ctx.get("user") else {}
    server = str(cluster["server"]).rstrip("/")
    base = path.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    if not server.startswith("https://"):
        return Connection(server, None, token)
    # A bare client context: loading the system trust store costs ~0.1 s and is useless when the
    # kubeconfig names its CA.
    context_ = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cluster.get("insecure-skip-tls-verify"):
        context_.check_hostname = False
        context_.verify_mode = ssl.CERT_NONE
    else:
        ca = _pem(cluster, "certificate-authority", base)
        if ca:
            context_.load_verify_locations(cadata=ca.decode())
        else:
            context_.load_default_certs()
    cert = _pem(user, "client-certificate", base)
    key = _pem(user, "client-key", base)
    if cert and key:
        with tempfile.TemporaryDirectory(prefix="sched-cred-") as tmp:
            cert_path, key_path = Path(tmp, "c.pem"), Path(tmp, "k.pem")
            for p, data in ((cert_path, cert), (key_path, key)):
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            context_.load_cert_chain(cert_path, key_path)
    return Connection(server, context_, token)
