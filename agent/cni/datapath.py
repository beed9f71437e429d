"""Kernel side of a pod attachment: bridge, veth pair, addresses and routes (pyroute2 messages over
agent.cni.rtnl).

Every function is idempotent where the CNI spec needs it (a second bridge setup, DEL of something
already gone) and names the host veth deterministically from container id + ifname, so DEL finds it
even when the pod's namespace has already been destroyed.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from pyroute2.netlink.exceptions import NetlinkError

from agent.cni import errors
from agent.cni.errors import CniError
from agent.cni.netns import in_netns, open_netns
from agent.cni.rtnl import IFF_UP, Rtnl

LOOPBACK_INDEX = 1  # lo is always ifindex 1 in a network namespace
ETH_P_ARP, ETH_P_IP, ARPOP_REQUEST = 0x0806, 0x0800, 1
T = TypeVar("T")


def host_veth_name(container_id: str, ifname: str) -> str:
    """Stable 15-char name so DEL can find the host end without the pod namespace."""
    return "veth" + hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:11]


@dataclass
class LinkInfo:
    name: str
    mac: str
    sandbox: str = ""
    index: int = 0


@dataclass
class VethPair:
    host: LinkInfo
    peer_index: int  # ifindex of CNI_IFNAME inside the pod namespace
    peer_mac: str


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


@contextmanager
def host_netlink() -> Iterator[Rtnl]:
    """A netlink socket in the host namespace for one operation (creating one costs microseconds)."""
    rtnl = Rtnl()
    try:
        yield rtnl
    finally:
        rtnl.close()


def _in_pod(netns_path: str, fn: Callable[[Rtnl], T]) -> T:
    """Run fn with a netlink socket opened inside the pod's namespace."""
    fd = open_netns(netns_path)
    try:
        rtnl = in_netns(fd, Rtnl)  # the socket keeps the namespace it was born in
    finally:
        os.close(fd)
    with rtnl:
        return fn(rtnl)


def random_mac() -> str:
    """A locally administered unicast MAC, chosen here so ADD needs no read-back of the peer."""
    b = bytearray(os.urandom(6))
    b[0] = (b[0] & 0xFE) | 0x02
    return ":".join(f"{x:02x}" for x in b)


def add_address(rtnl: Rtnl, index: int, address: ipaddress.IPv4Interface, what: str) -> None:
    """Add an address; already being there is success (a retried ADD, a shared bridge)."""
    try:
        rtnl.add_address(index, address)
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


# /sys/class/net/<dev>/addr_assign_type of an address set by hand (NET_ADDR_SET); a bridge left to the
# kernel reads NET_ADDR_RANDOM (1), also after it has taken a port's MAC.
ADDR_SET = "3"


def _address_is_set(name: str) -> bool:
    try:
        return Path(f"/sys/class/net/{name}/addr_assign_type").read_text().strip() == ADDR_SET
    except OSError:
        return True  # cannot tell (no sysfs): leave the address alone


def ensure_bridge(
    rtnl: Rtnl, name: str, gateway: ipaddress.IPv4Interface | None, mtu: int, localnet: bool
) -> LinkInfo:
    """Create the bridge if missing, bring it up and give it the gateway address.

    The bridge's MAC is set, not left to the kernel: a bridge whose address was never set takes the
    lowest MAC of its ports, so adding or deleting any pod's veth could change the gateway's MAC,
    and every pod that had it in its ARP cache lost its gateway (the API server, DNS, Services, the
    world) until that entry went stale, some 30 s (kubenet pinned cbr0's MAC for the same reason).
    A bridge found with a kernel-chosen address (made by an older version, or by hand) is pinned at
    the address it has now, which changes nothing for the pods."""
    link = rtnl.get_link(name)
    if link is None:
        try:
            rtnl.add_bridge(name, mtu, address=random_mac())
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:  # a concurrent ADD made it first
                raise CniError(errors.INTERNAL, "cannot create bridge", f"{name}: {exc}") from exc
        link = rtnl.get_link(name)
        if link is None:
            raise CniError(errors.INTERNAL, "bridge vanished after creation", name)
    if link.kind != "bridge":
        raise CniError(errors.INVALID_CONFIG, "interface exists and is not a bridge", name)
    idx = link.index
    if not link.flags & IFF_UP:
        rtnl.set_link(idx, up=True)
    with _bridges_lock:
        memo = _bridges.get(name)
    if memo is None or memo.index != idx or memo.gateway != gateway:
        if not _address_is_set(name):
            rtnl.set_link(idx, address=link.address)
        if gateway is not None and gateway not in rtnl.addresses(idx):
            add_address(rtnl, idx, gateway, "gateway")
        with _bridges_lock:
            _bridges[name] = _BridgeMemo(idx, gateway)
    if localnet:
        # lets a hostPort DNAT from 127.0.0.1 be routed out to the pod (as the portmap plugin does)
        _write_sysctl(f"/proc/sys/net/ipv4/conf/{name}/route_localnet", "1")
    return LinkInfo(name=name, mac=link.address, index=idx)


def delete_link(rtnl: Rtnl, name: str) -> bool:
    """Delete a link by name; a missing link is fine (DEL is idempotent)."""
    try:
        return rtnl.del_link(name)
    except NetlinkError as exc:
        raise CniError(errors.INTERNAL, "cannot delete link", f"{name}: {exc}") from exc


def create_veth(
    rtnl: Rtnl, host_name: str, netns_fd: int, ifname: str, bridge_index: int, mtu: int, hairpin: bool
) -> VethPair:
    """Create the pair in one request: host end up and on the bridge, the peer born inside the pod
    namespace as CNI_IFNAME with a MAC we chose, so the pod side needs fewer round trips."""
    peer_mac = random_mac()
    for attempt in (1, 2):
        try:
            rtnl.add_veth(host_name, ifname, netns_fd, peer_mac, bridge_index, mtu)
            break
        except NetlinkError as exc:
            if exc.code != errno.EEXIST:
                raise CniError(errors.INTERNAL, "cannot create veth pair", f"{host_name}: {exc}") from exc
            if attempt == 2 or not delete_link(rtnl, host_name):
                # the host name is free, so the clash is CNI_IFNAME inside the pod
                raise CniError(errors.INTERNAL, "container interface already exists", ifname) from exc
            # else: a leftover host end of an ADD that died half way; removed, try again
    link = rtnl.get_link(host_name)
    if link is None:
        raise CniError(errors.INTERNAL, "veth vanished after creation", host_name)
    idx = link.index
    if not link.flags & IFF_UP:
        rtnl.set_link(idx, up=True)
    if hairpin:
        rtnl.set_hairpin(idx)
    return VethPair(
        host=LinkInfo(name=host_name, mac=link.address, index=idx),
        peer_index=link.link,
        peer_mac=peer_mac,
    )


def configure_container(
    netns_path: str,
    veth: VethPair,
    ifname: str,
    address: ipaddress.IPv4Interface,
    routes: list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Address]],
) -> LinkInfo:
    """Inside the pod: bring up lo and CNI_IFNAME, address it, add the routes, announce the address.
    Both sockets are opened in one visit to the namespace (a thread each visit)."""
    fd = open_netns(netns_path)
    try:
        rtnl, arp = in_netns(fd, _pod_sockets)
    finally:
        os.close(fd)
    try:
        with rtnl:
            rtnl.set_link(LOOPBACK_INDEX, up=True)
            rtnl.set_link(veth.peer_index, up=True)
            add_address(rtnl, veth.peer_index, address, "pod")
            for dst, gw in routes:
                try:
                    rtnl.add_route(dst, gw, veth.peer_index)
                except NetlinkError as exc:
                    if exc.code != errno.EEXIST:
                        raise CniError(errors.INTERNAL, "cannot add route", f"{dst} via {gw}: {exc}") from exc
        if arp is not None:
            announce(arp, ifname, veth.peer_mac, address.ip)
    finally:
        if arp is not None:
            arp.close()
    return LinkInfo(name=ifname, mac=veth.peer_mac, sandbox=netns_path, index=veth.peer_index)


def _pod_sockets() -> tuple[Rtnl, socket.socket | None]:
    """A netlink socket and a raw ARP socket born in the namespace of the calling thread (the ARP one
    None when it cannot be had: the announcement is best effort)."""
    rtnl = Rtnl()
    try:
        arp: socket.socket | None = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    except OSError:
        arp = None
    return rtnl, arp


def garp_frame(mac: str, ip: ipaddress.IPv4Address) -> bytes:
    """A gratuitous ARP request (sender and target both `ip`), broadcast: Ethernet header + ARP."""
    hw = bytes.fromhex(mac.replace(":", ""))
    ethernet = b"\xff" * 6 + hw + struct.pack("!H", ETH_P_ARP)
    arp = struct.pack("!HHBBH", 1, ETH_P_IP, 6, 4, ARPOP_REQUEST) + hw + ip.packed + b"\x00" * 6 + ip.packed
    return ethernet + arp


def announce(sock: socket.socket, ifname: str, mac: str, ip: ipaddress.IPv4Address) -> None:
    """Tell the segment that `ip` is now at `mac` (upstream's bridge plugin does the same), through a
    raw ARP socket opened in the pod's namespace. Pod IPs come round again once the range wraps; the
    host and the other pods may still hold the last owner's MAC for it (the host's entry stays usable
    for up to half a minute after it was last confirmed), and would send the new pod's first packets
    (probes, Service traffic) to a MAC that is gone. A gratuitous ARP updates every entry that exists
    (it creates none, under the default arp_accept). Best effort, as upstream: a pod whose
    announcement is lost is still reachable once entries age."""
    try:
        sock.bind((ifname, ETH_P_ARP))  # the name is looked up in the socket's namespace
        sock.send(garp_frame(mac, ip))
    except OSError:
        return


def inspect_container(netns_path: str, ifname: str) -> ContainerState | None:
    """Read the pod side back (None when the interface is missing)."""

    def work(rtnl: Rtnl) -> ContainerState | None:
        link = rtnl.get_link(ifname)
        if link is None:
            return None
        lo = rtnl.get_link(index=LOOPBACK_INDEX)
        return ContainerState(
            ifname=ifname,
            mac=link.address,
            up=bool(link.flags & IFF_UP),
            mtu=link.mtu,
            addresses=rtnl.addresses(link.index),
            routes=rtnl.routes(link.index),
            lo_up=bool(lo is not None and lo.flags & IFF_UP),
        )

    return _in_pod(netns_path, work)


def bring_up_loopback(netns_path: str) -> LinkInfo:
    """The whole job of the loopback plugin."""
    _in_pod(netns_path, lambda rtnl: rtnl.set_link(LOOPBACK_INDEX, up=True))
    return LinkInfo(name="lo", mac="00:00:00:00:00:00", sandbox=netns_path, index=LOOPBACK_INDEX)


def host_link_master(rtnl: Rtnl, name: str) -> str | None:
    """Name of the bridge a host link is enslaved to, '' if none, None if the link is missing."""
    link = rtnl.get_link(name)
    if link is None:
        return None
    if not link.master:
        return ""
    bridge = rtnl.get_link(index=link.master)
    return bridge.name if bridge is not None else ""
