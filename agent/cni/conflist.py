"""Writes the node's CNI network configuration for containerd.

containerd's CRI plugin watches its conf dir and reloads on write/rename events (not on create), and
NetworkReady stays false until a valid conflist is there. Writing a temporary file that libcni
ignores (no .conf/.conflist/.json suffix) and renaming it over the target means containerd never
reads a half-written file.
"""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path
from typing import Any

from agent.cni.install import PLUGIN_NAME
from agent.cni.netconf import DEFAULT_BRIDGE, DEFAULT_DATA_DIR

DEFAULT_NETWORK = "pykubelet"
DEFAULT_FILENAME = "10-pykubelet.conflist"


def build_conflist(
    pod_cidr: str,
    *,
    name: str = DEFAULT_NETWORK,
    bridge: str = DEFAULT_BRIDGE,
    mtu: int = 0,
    ip_masq: bool = True,
    hairpin: bool = True,
    data_dir: str = DEFAULT_DATA_DIR,
    cni_version: str = "1.0.0",
) -> dict[str, Any]:
    """The conflist for one pod CIDR: our bridge plugin (with portMappings) then loopback."""
    subnet = ipaddress.ip_network(pod_cidr, strict=False)
    if not isinstance(subnet, ipaddress.IPv4Network):
        raise ValueError(f"only IPv4 pod CIDRs are supported, got {pod_cidr}")
    plugin: dict[str, Any] = {
        "type": PLUGIN_NAME,
        "bridge": bridge,
        "isGateway": True,
        "isDefaultGateway": True,
        "ipMasq": ip_masq,
        "hairpinMode": hairpin,
        "dataDir": data_dir,
        "ipam": {"ranges": [[{"subnet": str(subnet), "gateway": str(subnet.network_address + 1)}]]},
        "capabilities": {"portMappings": True},
    }
    if mtu:
        plugin["mtu"] = mtu
    return {"cniVersion": cni_version, "name": name, "plugins": [plugin, {"type": "loopback"}]}


def write_conflist(
    conf_dir: str | os.PathLike[str], pod_cidr: str, *, filename: str = DEFAULT_FILENAME, **options: Any
) -> Path:
    """Write (or replace) the conflist atomically; unchanged content is left alone so containerd
    does not reload for nothing. Returns the file's path."""
    directory = Path(conf_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / filename
    data = json.dumps(build_conflist(pod_cidr, **options), indent=2) + "\n"
    try:
        if target.read_text() == data:
            return target
    except FileNotFoundError:
        pass
    tmp = directory / f".{filename}.tmp"
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)
    return target
