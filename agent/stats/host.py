"""Figures of the host itself, read as cadvisor reads them: network devices from a /proc/<pid>/net/dev
(a pod's network namespace through its sandbox's PID, or the host's own), file system sizes by statvfs,
the boot time from /proc/stat, /proc/meminfo for the machine's memory and the PID limits."""

from __future__ import annotations

import os
from pathlib import Path

from agent.stats.kernelfiles import read_small
from agent.stats.model import FsStats, InterfaceStats

# cadvisor's isIgnoredDevice: loopback and the host ends of container links are no interfaces of theirs.
_IGNORED_PREFIXES = ("lo", "veth", "docker")


def parse_net_dev(text: str) -> tuple[InterfaceStats, ...]:
    """/proc/net/dev: after the two header lines, `name: rx_bytes packets errs ... tx_bytes packets errs`."""
    out: list[InterfaceStats] = []
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16:
            continue
        name = name.strip()
        if name.startswith(_IGNORED_PREFIXES):
            continue
        out.append(InterfaceStats(name, int(fields[0]), int(fields[2]), int(fields[8]), int(fields[10])))
    return tuple(out)


def net_dev(pid: int | None = None) -> tuple[InterfaceStats, ...] | None:
    raw = read_small("/proc/net/dev" if pid is None else f"/proc/{pid}/net/dev")
    return None if raw is None else parse_net_dev(raw.decode("ascii", "replace"))


def fs_stats(path: str, now: float) -> FsStats | None:
    """Capacity, free space and inodes of the file system holding `path` (upstream's fs info)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    capacity = st.f_blocks * st.f_frsize
    available = st.f_bavail * st.f_frsize
    return FsStats(
        time=now,
        available_bytes=available,
        capacity_bytes=capacity,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes_free=st.f_ffree,
        inodes=st.f_files,
        inodes_used=st.f_files - st.f_ffree,
    )


def boot_time(proc_stat: str | None = None) -> float:
    text = proc_stat if proc_stat is not None else Path("/proc/stat").read_text()
    for line in text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo in bytes (its kB are KiB)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def meminfo() -> dict[str, int]:
    return parse_meminfo(Path("/proc/meminfo").read_text())


def pid_limits() -> tuple[int | None, int | None]:
    """(kernel.pid_max, processes running now): upstream's rlimit stats of the node."""
    try:
        maxpid = int(Path("/proc/sys/kernel/pid_max").read_text().strip())
    except (OSError, ValueError):
        maxpid = None
    try:
        # The 4th field of /proc/loadavg is running/total scheduling entities (threads), as upstream reads it.
        curproc = int(Path("/proc/loadavg").read_text().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        curproc = None
    return maxpid, curproc


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, source) of each line of /proc/self/mountinfo (the source follows the " - " fstype)."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 5 and len(rest) >= 2:
            out.append((fields[4].replace("\\040", " "), rest[1]))
    return out


def device_of(path: str, mounts: list[tuple[str, str]]) -> str:
    """The source of the mount holding `path` (the longest mount point that is a prefix of it)."""
    best, source = "", ""
    for point, src in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, source = point, src
    return source


def mounts() -> list[tuple[str, str]]:
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return []
