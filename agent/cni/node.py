"""One object that owns a node's pod network on our plugin: plugin executables, the network service,
the conflist, and (on remove) the bridge, NAT entries and IPAM state.

It mirrors the rig's ReferenceBridgeNetwork (conf_dir, bin_dir, data_dir, write(), remove()) so the
rig, `pykubelet up` and the agent can switch to our plugin by swapping one object.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.cni import nat, protocol
from agent.cni.conflist import DEFAULT_FILENAME, DEFAULT_NETWORK, build_conflist, write_conflist
from agent.cni.datapath import delete_link, host_netlink
from agent.cni.install import install_plugins
from agent.cni.netconf import DEFAULT_BRIDGE
from agent.cni.service import NetworkService


@dataclass
class NodeNetwork:
    conf_dir: Path
    bin_dir: Path
    data_dir: Path
    pod_cidr: str
    name: str = DEFAULT_NETWORK
    bridge: str = DEFAULT_BRIDGE
    socket_path: str = protocol.DEFAULT_SOCKET
    ip_masq: bool = True
    mtu: int = 0
    service: NetworkService | None = field(default=None, init=False)

    @property
    def conflist_path(self) -> Path:
        return Path(self.conf_dir) / DEFAULT_FILENAME

    def _conflist_options(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bridge": self.bridge,
            "mtu": self.mtu,
            "ip_masq": self.ip_masq,
            "data_dir": str(self.data_dir),
        }

    def conflist(self) -> dict[str, Any]:
        return build_conflist(self.pod_cidr, **self._conflist_options())

    def plugin_conf(self) -> dict[str, Any]:
        """The network configuration our plugin receives from a runtime for this network."""
        doc = self.conflist()
        return {**doc["plugins"][0], "name": doc["name"], "cniVersion": doc["cniVersion"]}

    async def gc(self, valid_container_ids: set[str], ifname: str = "eth0") -> None:
        """CNI GC: free addresses, host veths and hostPort rules of sandboxes that no longer exist
        (after a reboot, or a runtime that lost a DEL). The agent passes the sandbox ids CRI lists."""
        from agent.cni.plugin import handle

        conf = {
            **self.plugin_conf(),
            "cniVersion": "1.1.0",
            "cni.dev/valid-attachments": [
                {"containerID": c, "ifname": ifname} for c in sorted(valid_container_ids)
            ],
        }
        resp = await asyncio.to_thread(handle, {"CNI_COMMAND": "GC"}, json.dumps(conf).encode())
        if resp.code:
            raise RuntimeError(f"CNI GC of network {self.name} failed: {resp.stdout} {resp.stderr}")

    def write(self) -> Path:
        """Install the executables and write the conflist (containerd's NetworkReady follows).
        Without a running service the plugin still works, in-process and slower."""
        install_plugins(self.bin_dir, self.socket_path)
        return write_conflist(self.conf_dir, self.pod_cidr, **self._conflist_options())

    async def start(self) -> None:
        """write() and serve CNI calls from this event loop (the agent's)."""
        # Compiling the shim and writing files: off the event loop, which serves pods meanwhile.
        await asyncio.to_thread(self.write)
        if self.service is None:
            self.service = NetworkService(self.socket_path)
        await self.service.start()

    async def stop(self) -> None:
        """Stop serving; pods keep their network (the plugin falls back to in-process)."""
        if self.service is not None:
            await self.service.stop()

    def remove(self) -> None:
        """Take the whole network away: conflist, bridge, NAT entries, IPAM state. For teardown of a
        test node; call after every pod is gone."""
        self.conflist_path.unlink(missing_ok=True)
        with host_netlink() as rtnl, contextlib.suppress(Exception):
            delete_link(rtnl, self.bridge)
        nat.remove_network(ipaddress.IPv4Network(self.pod_cidr, strict=False))
        shutil.rmtree(Path(self.data_dir) / self.name, ignore_errors=True)
