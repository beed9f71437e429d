"""What the host is: machine and boot IDs, kernel and OS, CPU, memory, huge pages, disk and addresses.

These are blocking reads of /proc, /sys and statvfs (and one name lookup for the node IP); callers run
them in a thread.
"""

from __future__ import annotations

import ipaddress
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from kubeclient.hostaddr import default_route_ip, local_ipv4

_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def _read(path: str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def architecture() -> str:
    machine = platform.machine()
    return _ARCH.get(machine, machine)


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out: dict[str, int] = {}
    for line in _read("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def _lookup(name: str) -> list[str]:
    try:
        return [info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)]
    except OSError:
        return []


class NodeIPError(Exception):
    pass


def _usable(ip: str, local: set[str]) -> bool:
    """upstream's validateNodeIP: not loopback, link-local, multicast or unspecified, and on this host."""
    addr = ipaddress.ip_address(ip)
    return (
        not (addr.is_loopback or addr.is_link_local or addr.is_multicast or addr.is_unspecified)
        and ip in local
    )


def choose_node_ip(
    node_ip: str,
    hostname: str,
    node_name: str,
    lookup: Callable[[str], list[str]] = _lookup,
    local: Callable[[], dict[str, list[str]]] = local_ipv4,
    route_ip: Callable[[], str] = default_route_ip,
) -> str:
    """The node's InternalIP as upstream's NodeAddress setter picks it without a cloud provider:
    --node-ip; else the host name when it is an IP; else the node name's address in DNS (one on this
    host, never loopback); else the default route's interface. Never a silent 127.0.0.1: NodeIPError."""
    if node_ip and node_ip not in ("0.0.0.0", "::"):
        return node_ip
    try:
        return str(ipaddress.ip_address(hostname))
    except ValueError:
        pass
    addresses = {ip for ips in local().values() for ip in ips}
    for ip in lookup(node_name):
        if _usable(ip, addresses):
            return ip
    ip = route_ip()
    if ip:
        return ip
    raise NodeIPError(f"can't get ip address of node {node_name}. error: no usable address")


@dataclass(frozen=True)
class HostFacts:
    machine_id: str
    system_uuid: str
    boot_id: str
    kernel_version: str
    os_image: str
    architecture: str
    cpus: int
    memory_bytes: int
    hostname: str
    hugepages: dict[int, int] = field(default_factory=dict)  # page size in bytes -> pages


def hugepages(root: str = "/sys/kernel/mm/hugepages") -> dict[int, int]:
    """The host's huge page pools: page size (bytes) -> number of pages (every size the kernel offers)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        if name.startswith("hugepages-") and name.endswith("kB"):
            try:
                size = int(name[len("hugepages-") : -2]) * 1024
                out[size] = int(_read(f"{root}/{name}/nr_hugepages", "0") or 0)
            except ValueError:
                continue
    return out


def host_facts() -> HostFacts:
    return HostFacts(
        machine_id=_read("/etc/machine-id"),
        system_uuid=_read("/sys/class/dmi/id/product_uuid").lower(),
        boot_id=_read("/proc/sys/kernel/random/boot_id"),
        kernel_version=os.uname().release,
        os_image=os_image(),
        architecture=architecture(),
        cpus=os.cpu_count() or 1,
        memory_bytes=meminfo().get("MemTotal", 0),
        hostname=socket.gethostname().lower(),
        hugepages=hugepages(),
    )


@dataclass(frozen=True)
class Usage:
    """Live figures the pressure conditions are judged on."""

    memory_available: int
    fs_capacity: int
    fs_available: int
    inodes_total: int
    inodes_free: int
    pids_max: int
    pids_used: int


def usage(root_dir: str) -> Usage:
    path = root_dir if os.path.isdir(root_dir) else "/"
    st = os.statvfs(path)
    mem = meminfo()
    pid_max = int(_read("/proc/sys/kernel/pid_max", "32768") or 32768)
    return Usage(
        memory_available=mem.get("MemAvailable", mem.get("MemFree", 0)),
        fs_capacity=st.f_blocks * st.f_frsize,
        fs_available=st.f_bavail * st.f_frsize,
        inodes_total=st.f_files,
        inodes_free=st.f_favail,
        pids_max=pid_max,
        pids_used=len(psutil.pids()),
    )
