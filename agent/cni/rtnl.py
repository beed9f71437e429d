"""A small synchronous rtnetlink client: requests packed with `struct`, some replies decoded by pyroute2.

pyroute2's IPRoute runs every request through an asyncio event loop of its own; for the dozen small
requests of a CNI ADD that machinery costs more CPU than the kernel work, and under concurrent ADDs
the service is bound by that CPU. Encoding a request through pyroute2's message classes still cost a
third of an ADD's CPU, so the few requests sent here are packed with `struct` (a header and a handful
of attributes each), and a link's answer is read the same way (`Link`); address and route dumps, read
only by CHECK and a bridge's first set-up, are still decoded by pyroute2's ifaddrmsg and rtmsg. Requests go straight through one blocking netlink socket.

A socket belongs to the network namespace it was created in, so `Rtnl()` made in a thread that has
joined a pod's namespace configures that pod, whichever thread uses it afterwards.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink import (
    NLA_F_NESTED,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_DUMP,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
)
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import (
    RTM_DELLINK,
    RTM_GETADDR,
    RTM_GETLINK,
    RTM_GETROUTE,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWROUTE,
    RTM_SETLINK,
)
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

NETLINK_ROUTE = 0
IFF_UP = 1
AF_INET = socket.AF_INET
_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, pid
RT_TABLE_MAIN = 254
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1

# Message bodies and attributes (linux/rtnetlink.h, linux/if_link.h, linux/if_addr.h, linux/veth.h).
_IFINFO = struct.Struct("=BxHiII")  # family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBi")  # family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
_ATTR = struct.Struct("=HH")  # length, type
_U32 = struct.Struct("=I")
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER, IFLA_LINKINFO, IFLA_NET_NS_FD = (
    1,
    3,
    4,
    5,
    10,
    18,
    28,
)
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
AF_BRIDGE, IFLA_PROTINFO, IFLA_BRPORT_MODE = 7, 12, 4
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST = 1, 2, 4
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_TABLE = 1, 4, 5, 15


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    size = _ATTR.size + len(payload)
    return _ATTR.pack(size, kind) + payload + b"\0" * (-size % 4)


def u32(kind: int, value: int) -> bytes:
    return attr(kind, _U32.pack(value))


def text(kind: int, value: str) -> bytes:
    return attr(kind, value.encode() + b"\0")


def mac(kind: int, value: str) -> bytes:
    return attr(kind, bytes.fromhex(value.replace(":", "")))


def ifinfo(index: int = 0, up: bool | None = None) -> bytes:
    """An ifinfomsg; `up` sets or clears IFF_UP (None: leaves the flags alone)."""
    return _IFINFO.pack(0, 0, index, IFF_UP if up else 0, 0 if up is None else IFF_UP)


def attrs(data: bytes, offset: int) -> dict[int, bytes]:
    """The attributes from `offset` to the end of `data` by type (the nested and byte-order flags cut)."""
    out: dict[int, bytes] = {}
    while offset + _ATTR.size <= len(data):
        size, kind = _ATTR.unpack_from(data, offset)
        if size < _ATTR.size:
            break
        out[kind & 0x3FFF] = data[offset + _ATTR.size : offset + size]
        offset += (size + 3) & ~3
    return out


@dataclass(frozen=True)
class Link:
    """The parts of an RTM_NEWLINK answer the plugin reads."""

    index: int
    flags: int
    name: str
    address: str  # MAC, aa:bb:cc:dd:ee:ff
    mtu: int
    master: int  # 0: on no bridge
    link: int  # a veth's peer ifindex (0: none)
    kind: str  # IFLA_INFO_KIND: "bridge", "veth", ... ("" for none)

    @classmethod
    def decode(cls, message: bytes) -> Link:
        _family, _type, index, flags, _change = _IFINFO.unpack_from(message, _HEADER.size)
        found = attrs(message, _HEADER.size + _IFINFO.size)

        def number(kind: int) -> int:
            value = found.get(kind)
            return _U32.unpack_from(value)[0] if value and len(value) >= 4 else 0

        kind = attrs(found.get(IFLA_LINKINFO, b""), 0).get(IFLA_INFO_KIND, b"")
        return cls(
            index=index,
            flags=flags,
            name=found.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(),
            address=":".join(f"{b:02x}" for b in found.get(IFLA_ADDRESS, b"")),
            mtu=number(IFLA_MTU),
            master=number(IFLA_MASTER),
            link=number(IFLA_LINK),
            kind=kind.rstrip(b"\0").decode(),
        )


def _decoded(message_class: type) -> Callable[[bytes], Any]:
    """A reply decoder from one of pyroute2's message classes."""

    def decode(chunk: bytes) -> Any:
        m = message_class(chunk)
        m.decode()
        return m

    return decode


class Rtnl:
    """One NETLINK_ROUTE socket; not thread safe (one per thread or per operation)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -----------------------------------------------------------------------------

    def request(
        self, body: bytes, msg_type: int, flags: int, reply: Callable[[bytes], Any] | None = None
    ) -> list[Any]:
        """Send one request (`body`: the message after the netlink header) and collect its answer:
        replies decoded by `reply` for GET/DUMP, [] for an ACK; a kernel error raises NetlinkError with
        its errno."""
        self._seq += 1
        seq = self._seq
        self.sock.send(_HEADER.pack(_HEADER.size + len(body), msg_type, flags, seq, 0) + body)
        out: list[Any] = []
        dump = flags & NLM_F_DUMP == NLM_F_DUMP
        while True:
            data = self.sock.recv(1 << 16)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, mtype, _mflags, mseq, _pid = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    raise NetlinkError(errno.EPROTO, "truncated netlink message")
                chunk = data[offset : offset + length]
                offset += (length + 3) & ~3
                if mseq != seq:
                    continue  # a late answer to an earlier request
                if mtype == NLMSG_ERROR:
                    code = struct.unpack_from("=i", chunk, _HEADER.size)[0]
                    if code:
                        raise NetlinkError(-code)
                    return out  # the ACK ends a request
                if mtype == NLMSG_DONE:
                    return out
                if reply is not None:
                    out.append(reply(chunk))
                    if not dump:
                        return out

    # -- links ---------------------------------------------------------------------------------

    def get_link(self, name: str | None = None, index: int = 0) -> Link | None:
        """RTM_GETLINK by name or index; None when there is no such link."""
        body = ifinfo(index) + (text(IFLA_IFNAME, name) if name is not None else b"")
        try:
            found = self.request(body, RTM_GETLINK, NLM_F_REQUEST, Link.decode)
        except NetlinkError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        return found[0] if found else None

    def set_link(
        self, index: int, up: bool | None = None, master: int | None = None, address: str | None = None
    ) -> None:
        body = ifinfo(index, up)
        if master is not None:
            body += u32(IFLA_MASTER, master)
        if address is not None:
            body += mac(IFLA_ADDRESS, address)
        self.request(body, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK)

    def set_hairpin(self, index: int, on: bool = True) -> None:
        """A bridge port's hairpin mode: RTM_SETLINK for AF_BRIDGE with IFLA_PROTINFO's IFLA_BRPORT_MODE,
        as `bridge link set ... hairpin on` and upstream's bridge plugin (netlink's LinkSetHairpin) set
        it. (The sysfs file brport/hairpin_mode does the same, but its writer spins, restarting the
        write, while another task holds the rtnl lock: under concurrent ADDs, a CPU burner.)"""
        body = _IFINFO.pack(AF_BRIDGE, 0, index, 0, 0) + attr(
            IFLA_PROTINFO | NLA_F_NESTED, attr(IFLA_BRPORT_MODE, bytes([1 if on else 0]))
        )
        self.request(body, RTM_SETLINK, NLM_F_REQUEST | NLM_F_ACK)

    def add_bridge(self, name: str, mtu: int = 0, address: str | None = None) -> None:
        """A new bridge, up; with `address` its MAC is set (the kernel then never replaces it)."""
        body = ifinfo(up=True) + text(IFLA_IFNAME, name) + attr(IFLA_LINKINFO, text(IFLA_INFO_KIND, "bridge"))
        if address is not None:
            body += mac(IFLA_ADDRESS, address)
        if mtu:
            body += u32(IFLA_MTU, mtu)
        self.request(body, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def add_veth(
        self, name: str, peer: str, peer_netns_fd: int, peer_mac: str, master: int, mtu: int = 0
    ) -> None:
        """Create a veth pair, host end `name` up on bridge `master`, the peer born in another netns."""
        mtu_attr = u32(IFLA_MTU, mtu) if mtu else b""
        peer_body = (
            ifinfo()
            + text(IFLA_IFNAME, peer)
            + u32(IFLA_NET_NS_FD, peer_netns_fd)
            + mac(IFLA_ADDRESS, peer_mac)
        )
        linkinfo = text(IFLA_INFO_KIND, "veth") + attr(
            IFLA_INFO_DATA, attr(VETH_INFO_PEER, peer_body + mtu_attr)
        )
        body = (
            ifinfo(up=True)
            + text(IFLA_IFNAME, name)
            + u32(IFLA_MASTER, master)
            + attr(IFLA_LINKINFO, linkinfo)
            + mtu_attr
        )
        self.request(body, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def del_link(self, name: str) -> bool:
        """Delete a link by name; False when it did not exist."""
        try:
            self.request(ifinfo() + text(IFLA_IFNAME, name), RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK)
        except NetlinkError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return False
            raise
        return True

    # -- addresses and routes ------------------------------------------------------------------

    def add_address(self, index: int, address: ipaddress.IPv4Interface) -> None:
        body = (
            _IFADDR.pack(AF_INET, address.network.prefixlen, 0, 0, index)
            + attr(IFA_LOCAL, address.ip.packed)
            + attr(IFA_ADDRESS, address.ip.packed)
            + attr(IFA_BROADCAST, address.network.broadcast_address.packed)
        )
        self.request(body, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def addresses(self, index: int) -> list[ipaddress.IPv4Interface]:
        body = _IFADDR.pack(AF_INET, 0, 0, 0, 0)
        found = self.request(body, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, _decoded(ifaddrmsg))
        return [
            ipaddress.IPv4Interface(f"{m.get_attr('IFA_ADDRESS')}/{m['prefixlen']}")
            for m in found
            if m["index"] == index
        ]

    def add_route(self, dst: ipaddress.IPv4Network, gateway: ipaddress.IPv4Address, oif: int) -> None:
        body = (
            _RTMSG.pack(
                AF_INET, dst.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0
            )
            + attr(RTA_GATEWAY, gateway.packed)
            + u32(RTA_OIF, oif)
            + u32(RTA_TABLE, RT_TABLE_MAIN)
        )
        if dst.prefixlen:
            body += attr(RTA_DST, dst.network_address.packed)
        self.request(body, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def routes(self, oif: int) -> list[tuple[str, str]]:
        """(dst/len, gateway) of main-table IPv4 routes out of oif."""
        body = _RTMSG.pack(AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)
        out = []
        for r in self.request(body, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, _decoded(rtmsg)):
            if r.get_attr("RTA_OIF") != oif or (r.get_attr("RTA_TABLE") or r["table"]) != RT_TABLE_MAIN:
                continue
            out.append(
                (f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}", r.get_attr("RTA_GATEWAY") or "")
            )
        return sorted(out)
