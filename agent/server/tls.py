"""The kubelet's serving certificate: the configured pair, or a self-signed one made once in
<root-dir>/pki as kubelet.crt/kubelet.key (as upstream does when no tlsCertFile is given), valid for the
node's names and IPs. The machinery is the shared one (`kubeclient.serving`)."""

from __future__ import annotations

from pathlib import Path

from kubeclient.serving import ensure_self_signed as _ensure_self_signed
from kubeclient.serving import server_context

__all__ = ["ensure_self_signed", "server_context"]


def ensure_self_signed(pki_dir: Path, node_name: str, ips: list[str]) -> tuple[Path, Path]:
    return _ensure_self_signed(pki_dir, node_name, ips, stem="kubelet")
