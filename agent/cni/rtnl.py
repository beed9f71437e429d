"""A small synchronous rtnetlink client built on pyroute2's message classes.

pyroute2's IPRoute runs every request through an asyncio event loop of its own; for the dozen small
requests of a CNI ADD that machinery costs more CPU than the kernel work, and under concurrent ADDs
the service is bound by that CPU. Here pyroute2 still encodes and decodes every message (ifinfmsg,
ifaddrmsg, rtmsg), but requests go straight through one blocking netlink socket.

A socket belongs to the network namespace it was created in, so `Rtnl()` made in a thread that has
joined a pod's namespace configures that pod, whichever thread uses it afterwards.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from typing import Any

from pyroute2.netlink import (
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
)
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

NETLINK_ROUTE = 0
IFF_UP = 1
AF_INET = socket.AF_INET
_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, pid
RT_TABLE_MAIN = 254
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1


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

    def request(self, msg: Any, msg_type: int, flags: int, reply: type | None = None) -> list[Any]:
        """Send one request and collect its answer: decoded replies for GET/DUMP, [] for an ACK;
        a kernel error raises NetlinkError with its errno."""
        self._seq += 1
        seq = self._seq
        msg["header"]["type"] = msg_type
        msg["header"]["flags"] = flags
        msg["header"]["sequence_number"] = seq
        msg.encode()
        self.sock.send(msg.data)
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
                    m = reply(chunk)
                    m.decode()
                    out.append(m)
                    if not dump:
                        return out

    # -- links ---------------------------------------------------------------------------------

    def get_link(self, name: str | None = None, index: int = 0) -> Any | None:
        """RTM_GETLINK by name or index; None when there is no such link."""
        msg = ifinfmsg()
        msg["index"] = index
        if name is not None:
            msg["attrs"] = [["IFLA_IFNAME", name]]
        try:
            found = self.request(msg, RTM_GETLINK, NLM_F_REQUEST, ifinfmsg)
        except NetlinkError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        return found[0] if found else None

    def set_link(
        self, index: int, up: bool | None = None, master: int | None = None, address: str | None = None
    ) -> None:
        msg = ifinfmsg()
        msg["index"] = index
        if up is not None:
            msg["flags"] = IFF_UP if up else 0
            msg["change"] = IFF_UP
        attrs: list[list[Any]] = []
        if master is not None:
            attrs.append(["IFLA_MASTER", master])
        if address is not None:
            attrs.append(["IFLA_ADDRESS", address])
        if attrs:
            msg["attrs"] = attrs
        self.request(msg, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK)

    def add_bridge(self, name: str, mtu: int = 0, address: str | None = None) -> None:
        """A new bridge, up; with `address` its MAC is set (the kernel then never replaces it)."""
        msg = ifinfmsg()
        msg["flags"] = msg["change"] = IFF_UP
        attrs: list[list[Any]] = [
            ["IFLA_IFNAME", name],
            ["IFLA_LINKINFO", {"attrs": [["IFLA_INFO_KIND", "bridge"]]}],
        ]
        if address is not None:
            attrs.append(["IFLA_ADDRESS", address])
        if mtu:
            attrs.append(["IFLA_MTU", mtu])
        msg["attrs"] = attrs
        self.request(msg, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def add_veth(
        self, name: str, peer: str, peer_netns_fd: int, peer_mac: str, master: int, mtu: int = 0
    ) -> None:
        """Create a veth pair, host end `name` up on bridge `master`, the peer born in another netns."""
        peer_attrs: list[list[Any]] = [
            ["IFLA_IFNAME", peer],
            ["IFLA_NET_NS_FD", peer_netns_fd],
            ["IFLA_ADDRESS", peer_mac],
        ]
        attrs: list[list[Any]] = [
            ["IFLA_IFNAME", name],
            ["IFLA_MASTER", master],
            [
                "IFLA_LINKINFO",
                {
                    "attrs": [
                        ["IFLA_INFO_KIND", "veth"],
                        ["IFLA_INFO_DATA", {"attrs": [["VETH_INFO_PEER", {"attrs": peer_attrs}]]}],
                    ]
                },
            ],
        ]
        if mtu:
            attrs.append(["IFLA_MTU", mtu])
            peer_attrs.append(["IFLA_MTU", mtu])
        msg = ifinfmsg()
        msg["flags"] = msg["change"] = IFF_UP
        msg["attrs"] = attrs
        self.request(msg, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def del_link(self, name: str) -> bool:
        """Delete a link by name; False when it did not exist."""
        msg = ifinfmsg()
        msg["attrs"] = [["IFLA_IFNAME", name]]
        try:
            self.request(msg, RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK)
        except NetlinkError as exc:
            if exc.code in (errno.ENODEV, errno.ENOENT):
                return False
            raise
        return True

    # -- addresses and routes ------------------------------------------------------------------

    def add_address(self, index: int, address: ipaddress.IPv4Interface) -> None:
        msg = ifaddrmsg()
        msg["family"] = AF_INET
        msg["prefixlen"] = address.network.prefixlen
        msg["index"] = index
        msg["attrs"] = [
            ["IFA_LOCAL", str(address.ip)],
            ["IFA_ADDRESS", str(address.ip)],
            ["IFA_BROADCAST", str(address.network.broadcast_address)],
        ]
        self.request(msg, RTM_NEWADDR, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def addresses(self, index: int) -> list[ipaddress.IPv4Interface]:
        msg = ifaddrmsg()
        msg["family"] = AF_INET
        found = self.request(msg, RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, ifaddrmsg)
        return [
            ipaddress.IPv4Interface(f"{m.get_attr('IFA_ADDRESS')}/{m['prefixlen']}")
            for m in found
            if m["index"] == index
        ]

    def add_route(self, dst: ipaddress.IPv4Network, gateway: ipaddress.IPv4Address, oif: int) -> None:
        msg = rtmsg()
        msg["family"] = AF_INET
        msg["dst_len"] = dst.prefixlen
        msg["table"] = RT_TABLE_MAIN
        msg["proto"] = RTPROT_BOOT
        msg["scope"] = RT_SCOPE_UNIVERSE
        msg["type"] = RTN_UNICAST
        attrs: list[list[Any]] = [
            ["RTA_GATEWAY", str(gateway)],
            ["RTA_OIF", oif],
            ["RTA_TABLE", RT_TABLE_MAIN],
        ]
        if dst.prefixlen:
            attrs.append(["RTA_DST", str(dst.network_address)])
        msg["attrs"] = attrs
        self.request(msg, RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL)

    def routes(self, oif: int) -> list[tuple[str, str]]:
        """(dst/len, gateway) of main-table IPv4 routes out of oif."""
        msg = rtmsg()
        msg["family"] = AF_INET
        out = []
        for r in self.request(msg, RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, rtmsg):
            if r.get_attr("RTA_OIF") != oif or (r.get_attr("RTA_TABLE") or r["table"]) != RT_TABLE_MAIN:
                continue
            out.append(
                (f"{r.get_attr('RTA_DST') or '0.0.0.0'}/{r['dst_len']}", r.get_attr("RTA_GATEWAY") or "")
            )
        return sorted(out)
