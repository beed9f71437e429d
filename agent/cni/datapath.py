"""Kernel side of a pod attachment with pyroute2: bridge, veth pair, addresses and routes.

Every function is idempotent where the CNI spec needs it (a second bridge setup, DEL of something
already gone) and names the host veth deterministically from container id + ifname, so DEL finds it
even when the pod's namespace has already been destroyed.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from agent.cni import errors
from agent.cni.errors import CniError
from agent.cni.netns import in_netns, open_netns


def host_veth_name(container_id: str, ifname: str) -> str:
    """Stable 15-char name so DEL can find the host end without the pod namespace."""
    return "veth" + hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:11]


@dataclass
class LinkInfo:
    name: str
    mac: str
    sandbox: str = ""
    index: int = 0


LOOPBACK_INDEX = 1


@dataclass
class ContainerState:
    """What CHECK and the side-by-side tests compare: the pod side of an attachment."""

    ifname: str
    mac: str
    up: bool
    mtu: int
    addresses: list[ipaddress.IPv4Interface] = field(default_factory=list)
    routes: list[tuple[str, str]] = field(default_factory=list)  # (dst, gateway)
    lo_up: bool = False


def _write_sysctl(path: str, value: str) -> None:
    p = Path(path)
    try:
        if p.read_text().strip() != value:
            p.write_text(value)
    except OSError as exc:
        raise CniError(errors.IO_FAILURE, "cannot set sysctl", f"{path}: {exc}") from exc


def enable_ip_forward() -> None:
    _write_sysctl("/proc/sys/net/ipv4/ip_forward", "1")


_local = threading.local()


@contextmanager
def host_netlink() -> Iterator[IPRoute]:
    """A netlink socket in the host namespace, kept per thread: the service's worker threads live
    long, and opening one costs about a millisecond of an ADD. A socket that saw an unexpected
    error is dropped rather than trusted again."""
    ipr = getattr(_local, "ipr", None)
    if ipr is None:
        ipr = _local.ipr = IPRoute()
    try:
        yield ipr
    except CniError:
        raise  # our own verdicts leave the socket in a clean state
    except BaseException:
        _local.ipr = None
        ipr.close()
        raise


def _get(ipr: IPRoute, name: str) -> Any | None:
    """One RTM_GETLINK by name (a dump via link_lookup costs more); None when missing."""
    try:
        return ipr.link("get", ifname=name)[0]
    except NetlinkError as exc:
        if exc.code in (errno.ENODEV, errno.ENOENT):
            return None
        raise


def _index(ipr: IPRoute, name: str) -> int | None:
    link = _get(ipr, name)
    return None if link is None else int(link["index"])


def random_mac() -> str:
    """A locally administered unicast MAC, chosen here so ADD needs no read-back of the peer."""
    b = bytearray(os.urandom(6))
    b[0] = (b[0] & 0xFE) | 0x02
    return ":".join(f"{x:02x}" for x in b)


def add_address(ipr: IPRoute, index: int, address: ipaddress.IPv4Interface, what: str) -> None:
    """Add an address; already being there is success (a retried ADD, a shared bridge)."""
    try:
        ipr.addr("add", index=index, address=str(address.ip), prefixlen=address.network.prefixlen)
    except NetlinkError as exc:
        if exc.code != errno.EEXIST:
            raise CniError(errors.INTERNAL, f"cannot add {what} address", f"{address}: {exc}") from exc


@dataclass
class _BridgeMemo:
    index: int
    gateway: ipaddress.IPv4Interface | None


# ifindex + gateway of bridges this process already set up: a bridge that was deleted and created
# again gets a new ifindex, so the memo never skips work on a different bridge.
_bridges: dict[str, _BridgeMemo] = {}
_bridges_lock = threading.Lock()


def ensure_bridge(
    ipr: IPRoute, name: str, gateway: ipaddress.IPv4Interface | None, mtu: int, localnet: bool
) -> LinkInfo:
    """Create the bridge if missing, bring it up and give it the gateway address."""
    link = _get(ipr, name)
    if link is None:
        spec: dict[str, object] = {"ifname": name, "kind": "bridge", "state": "up"}
        if mtu:
            spec["mtu"] = mtu
        try:
            ipr.link("add", **spec)
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise CniError(errors.INTERNAL, "cannot create bridge", f"{name}: {exc}") from exc
        link = _get(ipr, name)
        if link is None:
            raise CniError(errors.INTERNAL, "bridge vanished after creation", name)
    info = link.get_attr("IFLA_LINKINFO")
    if info is None or info.get_attr("IFLA_INFO_KIND") != "bridge":
        raise CniError(errors.INVALID_CONFIG, "interface exists and is not a bridge", name)
    idx = int(link["index"])
    with _bridges_lock:
        memo = _bridges.get(name)
    if not link["flags"] & 1:
        ipr.link("set", index=idx, state="up")
    if memo is None or memo.index != idx or memo.gateway != gateway:
        if gateway is not None:
            have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr(index=idx, family=2)}
            if (str(gateway.ip), gateway.network.prefixlen) not in have:
                add_address(ipr, idx, gateway, "gateway")
        with _bridges_lock:
            _bridges[name] = _BridgeMemo(idx, gateway)
    if localnet:
        # lets a hostPort DNAT from 127.0.0.1 be routed out to the pod (as the portmap plugin does)
        _write_sysctl(f"/proc/sys/net/ipv4/conf/{name}/route_localnet", "1")
    return LinkInfo(name=name, mac=link.get_attr("IFLA_ADDRESS"), index=idx)


def delete_link(ipr: IPRoute, name: str) -> bool:
    """Delete a link by name; a missing link is fine (DEL is idempotent)."""
    try:
        ipr.link("del", ifname=name)
    except NetlinkError as exc:
        if exc.code not in (errno.ENODEV, errno.ENOENT):
            raise CniError(errors.INTERNAL, "cannot delete link", f"{name}: {exc}") from exc
        return False
    return True


@dataclass
class VethPair:
    host: LinkInfo
    peer_index: int  # ifindex of CNI_IFNAME inside the pod namespace
    peer_mac: str


def create_veth(
    ipr: IPRoute, host_name: str, netns_fd: int, ifname: str, bridge_index: int, mtu: int, hairpin: bool
) -> VethPair:
    """Create the pair with its peer born directly inside the pod namespace under CNI_IFNAME,
    enslaved and with a MAC we chose, so the pod side needs fewer round trips."""
    peer_mac = random_mac()
    peer: dict[str, object] = {"ifname": ifname, "net_ns_fd": netns_fd, "address": peer_mac}
    spec: dict[str, object] = {
        "ifname": host_name,
        "kind": "veth",
        "peer": peer,
        "master": bridge_index,
        "state": "up",
    }
    if mtu:
        spec["mtu"] = mtu
        peer["mtu"] = mtu
    for attempt in (1, 2):
        try:
            ipr.link("add", **spec)
            break
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise CniError(errors.INTERNAL, "cannot create veth pair", f"{host_name}: {exc}") from exc
            if attempt == 2 or not delete_link(ipr, host_name):
                # the host name is free, so the clash is CNI_IFNAME inside the pod
                raise CniError(errors.INTERNAL, "container interface already exists", ifname) from exc
            # else: a leftover host end of an ADD that died half way; removed, try again
    link = _get(ipr, host_name)
    if link is None:
        raise CniError(errors.INTERNAL, "veth vanished after creation", host_name)
    idx = int(link["index"])
    if not link["flags"] & 1:
        ipr.link("set", index=idx, state="up")
    if hairpin:
        Path(f"/sys/class/net/{host_name}/brport/hairpin_mode").write_text("1")
    return VethPair(
        host=LinkInfo(name=host_name, mac=link.get_attr("IFLA_ADDRESS"), index=idx),
        peer_index=int(link.get_attr("IFLA_LINK")),
        peer_mac=peer_mac,
    )


def configure_container(
    netns_path: str,
    veth: VethPair,
    ifname: str,
    address: ipaddress.IPv4Interface,
    routes: list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]],
) -> LinkInfo:
    """Inside the pod: address CNI_IFNAME, bring up lo (always ifindex 1 in a namespace), add routes."""
    fd = open_netns(netns_path)
    try:

        def work() -> None:
            with IPRoute() as ipr:
                ipr.link("set", index=LOOPBACK_INDEX, state="up")
                idx = veth.peer_index
                ipr.link("set", index=idx, state="up")
                add_address(ipr, idx, address, "pod")
                for dst, gw in routes:
                    try:
                        ipr.route("add", dst=str(dst), gateway=str(gw), oif=idx)
                    except NetlinkError as exc:
                        if exc.code != errno.EEXIST:
                            raise CniError(
                                errors.INTERNAL, "cannot add route", f"{dst} via {gw}: {exc}"
                            ) from exc

        in_netns(fd, work)
    finally:
        os.close(fd)
    return LinkInfo(name=ifname, mac=veth.peer_mac, sandbox=netns_path, index=veth.peer_index)


def inspect_container(netns_path: str, ifname: str) -> ContainerState | None:
    """Read the pod side back (None when the interface is missing)."""
    fd = open_netns(netns_path)
    try:

        def work() -> ContainerState | None:
            with IPRoute() as ipr:
                idx = _index(ipr, ifname)
                if idx is None:
                    return None
                link = ipr.link("get", index=idx)[0]
                lo = _index(ipr, "lo")
                lo_up = bool(lo is not None and ipr.link("get", index=lo)[0]["flags"] & 1)
                addrs = [
                    ipaddress.IPv4Interface(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}")
                    for a in ipr.get_addr(index=idx, family=2)
                ]
                routes = []
                for r in ipr.get_routes(family=2, table=254):
                    if r.get_attr("RTA_OIF") != idx:
                        continue
                    dst = r.get_attr("RTA_DST")
                    routes.append((f"{dst or '0.0.0.0'}/{r['dst_len']}", r.get_attr("RTA_GATEWAY") or ""))
                return ContainerState(
                    ifname=ifname,
                    mac=link.get_attr("IFLA_ADDRESS"),
                    up=bool(link["flags"] & 1),
                    mtu=link.get_attr("IFLA_MTU"),
                    addresses=addrs,
                    routes=sorted(routes),
                    lo_up=lo_up,
                )

        return in_netns(fd, work)
    finally:
        os.close(fd)


def delete_container_link(netns_path: str, ifname: str) -> None:
    """Remove CNI_IFNAME inside the pod namespace (its veth peer goes with it)."""
    try:
        fd = open_netns(netns_path)
    except CniError:
        return  # namespace already gone: so is the interface

    def work() -> None:
        with IPRoute() as ipr:
            delete_link(ipr, ifname)

    try:
        in_netns(fd, work)
    finally:
        os.close(fd)


def bring_up_loopback(netns_path: str) -> LinkInfo:
    """The whole job of the loopback plugin."""
    fd = open_netns(netns_path)
    try:

        def work() -> LinkInfo:
            with IPRoute() as ipr:
                lo = _index(ipr, "lo")
                if lo is None:
                    raise CniError(errors.INTERNAL, "no loopback interface in namespace", netns_path)
                ipr.link("set", index=lo, state="up")
                return LinkInfo(name="lo", mac="00:00:00:00:00:00", sandbox=netns_path)

        return in_netns(fd, work)
    finally:
        os.close(fd)


def host_link_master(ipr: IPRoute, name: str) -> str | None:
    """Name of the bridge a host link is enslaved to, '' if none, None if the link is missing."""
    idx = _index(ipr, name)
    if idx is None:
        return None
    master = ipr.link("get", index=idx)[0].get_attr("IFLA_MASTER")
    if not master:
        return ""
    found = ipr.link("get", index=master)
    return found[0].get_attr("IFLA_IFNAME") if found else ""
