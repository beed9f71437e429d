"""The host's own IPv4 addresses and the one it would advertise: the first global address of the
interface holding the default route, as upstream's ChooseHostInterface picks it (kube-apiserver's
--advertise-address default when it binds 0.0.0.0, the kubelet's node IP fallback, the address the
rig's DNS and proxy answer on). Blocking reads of /proc and the interface table: cheap, but callers
on an event loop run them once, at start."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import psutil


def _route_interface() -> str:
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            return fields[0]
    return ""


def local_ipv4() -> dict[str, list[str]]:
    """IPv4 addresses by interface."""
    return {
        name: [a.address for a in entries if a.family == socket.AF_INET]
        for name, entries in psutil.net_if_addrs().items()
    }


def default_route_ip() -> str:
    """The first global IPv4 address of the interface holding the default route ("" when none)."""
    for ip in local_ipv4().get(_route_interface(), []):
        addr = ipaddress.ip_address(ip)
        if not (addr.is_loopback or addr.is_link_local or addr.is_multicast or addr.is_unspecified):
            return ip
    return ""
