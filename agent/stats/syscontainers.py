"""Where the node's system containers are: the cgroups of the kubelet (this process) and of the container
runtime, whose usage the Summary lists beside `pods` under `node.systemContainers`, as upstream's
summary_sys_containers.go does from the container manager's NodeConfig.

Upstream takes the kubelet's group from `kubeletCgroups`, else its own process's cgroup (the container
manager's periodic getContainer(os.Getpid())), and the runtime's from `runtimeCgroups`. Without that
setting upstream lists no runtime entry; this agent finds the runtime's process as the peer of its CRI
socket (SO_PEERCRED) and reads its cgroup, so `runtime` is listed whenever the runtime is local."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from agent.stats.cgroups import parse_proc_cgroup
from agent.stats.kernelfiles import read_small

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class SystemCgroup:
    name: str  # "kubelet", "runtime" (upstream's statsapi.SystemContainer* names)
    cpu_path: str
    memory_path: str
    start_time: float  # unix seconds the process started (0: unknown)


def process_cgroup(pid: int) -> tuple[str, str] | None:
    text = read_small(f"/proc/{pid}/cgroup")
    return parse_proc_cgroup(text.decode("latin-1")) if text is not None else None


def unix_socket_peer(endpoint: str) -> int | None:
    """The pid of the process serving a unix:// endpoint, None when it is not local or not there."""
    path = endpoint.removeprefix("unix://")
    if "://" in path or not path:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(path)
            pid, _, _ = _UCRED.unpack(s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except OSError:
        return None
    return pid or None


def process_start(pid: int, boot_time: float) -> float:
    """A process's start in unix seconds from /proc/<pid>/stat's starttime (clock ticks after boot)."""
    text = read_small(f"/proc/{pid}/stat")
    if text is None:
        return 0.0
    try:
        fields = text.rsplit(b")", 1)[1].split()
        return boot_time + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return 0.0


def _configured(name: str, path: str) -> SystemCgroup:
    return SystemCgroup(name, path, path, 0.0)


def locate(
    kubelet_cgroups: str, runtime_cgroups: str, runtime_endpoint: str, boot_time: float
) -> list[SystemCgroup]:
    """The kubelet's and the runtime's cgroups, in that order; one whose process cannot be found is left
    out (upstream skips a system container it cannot read)."""
    out: list[SystemCgroup] = []
    me = os.getpid()
    if kubelet_cgroups:
        out.append(replace_start(_configured("kubelet", kubelet_cgroups), process_start(me, boot_time)))
    elif (own := process_cgroup(me)) is not None:
        out.append(SystemCgroup("kubelet", own[0], own[1], process_start(me, boot_time)))
    if runtime_cgroups:
        out.append(_configured("runtime", runtime_cgroups))
    elif (pid := unix_socket_peer(runtime_endpoint)) is not None and (found := process_cgroup(pid)):
        out.append(SystemCgroup("runtime", found[0], found[1], process_start(pid, boot_time)))
    return out


def replace_start(c: SystemCgroup, start: float) -> SystemCgroup:
    return SystemCgroup(c.name, c.cpu_path, c.memory_path, start)
