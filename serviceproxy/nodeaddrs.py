"""Which addresses are this node's, and which of them answer NodePorts (kube-proxy's node IP detection
and `--nodeport-addresses`, as its nftables mode reads them in 1.32).

The node IP: `--bind-address` when it names one, else the Node object's InternalIP (then ExternalIP),
read once at start as kube-proxy does; unknown when neither gives one. NodePorts: by default
("primary") only on the node IP, nftables mode's default; a CIDR list keeps the host's addresses inside
those ranges (plus the node IP when "primary" is listed too); a range of length 0 means every local
address. An unknown node IP with "primary" falls back to every local address (with a warning) rather
than to no NodePort at all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("proxy")
PRIMARY = "primary"


class NodePortAddressError(ValueError):
    """A --nodeport-addresses entry that is neither a CIDR nor "primary"."""


def parse_nodeport_addresses(value: str) -> tuple[str, ...]:
    """The flag's comma-separated entries, validated; () is the default (primary)."""
    out = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item == PRIMARY:
            out.append(item)
            continue
        try:
            net = ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise NodePortAddressError(
                f'invalid value for --nodeport-addresses: "{item}" is not "primary" or a valid CIDR'
            ) from None
        if net.version == 4:
            out.append(str(net))
    return tuple(out)


def nodeport_ips(
    spec: tuple[str, ...], node_ips: tuple[str, ...], local_ips: tuple[str, ...]
) -> tuple[str, ...] | None:
    """The addresses NodePorts answer on; None for every local address."""
    spec = spec or (PRIMARY,)
    nets = [ipaddress.ip_network(c) for c in spec if c != PRIMARY]
    if any(n.prefixlen == 0 for n in nets):
        return None
    out = {ip for ip in local_ips if any(ipaddress.ip_address(ip) in n for n in nets)}
    if PRIMARY in spec:
        if not node_ips:
            log.warning("no node IP known for --nodeport-addresses=primary; NodePorts on every local address")
            return None
        out |= set(node_ips)
    return tuple(sorted(out, key=ipaddress.ip_address))


async def local_ipv4(netns: str = "") -> tuple[str, ...]:
    """The IPv4 addresses of this host's (or the named namespace's) interfaces, loopback excluded."""
    prefix = ["ip", "netns", "exec", netns] if netns else []
    argv = [*prefix, "ip", "-j", "-4", "addr", "show"]
    pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(*argv, stdout=pipe, stderr=null)
    out, _ = await proc.communicate()
    ips = []
    for link in json.loads(out or b"[]"):
        for info in link.get("addr_info") or []:
            ip = info.get("local")
            if ip and not ipaddress.ip_address(ip).is_loopback:
                ips.append(ip)
    return tuple(ips)


async def node_ips(client: KubeClient, node: str, bind_address: str, wait: float = 10.0) -> tuple[str, ...]:
    """The node's IP: --bind-address, else the Node's InternalIP (ExternalIP) once it shows one."""
    try:
        if not ipaddress.ip_address(bind_address).is_unspecified:
            return (bind_address,)
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            obj = await client.get(f"/api/v1/nodes/{node}")
            addresses = (obj.get("status") or {}).get("addresses") or []
            for kind in ("InternalIP", "ExternalIP"):
                for address in addresses:
                    ip = ipaddress.ip_address(address.get("address", ""))
                    if address.get("type") == kind and ip.version == 4:
                        return (str(ip),)
        except (ApiError, OSError, ValueError) as err:
            log.debug("reading node node=%s error=%s", node, err)
        if loop.time() >= deadline:
            log.warning("can't determine this node's IP node=%s; NodePorts and source ranges use none", node)
            return ()
        await asyncio.sleep(0.5)
