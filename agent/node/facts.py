"""What the host is: machine and boot IDs, kernel and OS, CPU, memory, disk and addresses.

These are blocking reads of /proc, /sys and statvfs; callers run them in a thread. Nothing here touches
the network: the internal IP comes from the interface that holds the default route.
"""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass
from pathlib import Path

import psutil

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


def default_route_ip() -> str:
    """The first IPv4 address of the interface holding the default route, else the hostname's."""
    iface = ""
    for line in _read("/proc/net/route").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 2 and fields[1] == "00000000":
            iface = fields[0]
            break
    addrs = psutil.net_if_addrs()
    for addr in addrs.get(iface, []):
        if addr.family == socket.AF_INET:
            return addr.address
    for name, entries in addrs.items():
        if name == "lo":
            continue
        for addr in entries:
            if addr.family == socket.AF_INET:
                return addr.address
    return "127.0.0.1"


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
