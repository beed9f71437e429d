"""emptyDir volumes: a folder under the pod's directory, or with `medium: Memory` a tmpfs mounted there.

The tmpfs is sized as upstream's calculateEmptyDirMemorySize does: the node's allocatable memory, or
less, the pod's memory limit (when every container has one), or less again, the volume's sizeLimit. The
agent mounts it in its own mount namespace (the host's) before the sandbox starts; the runtime
bind-mounts it into containers. `unmount_under` takes every mount below a pod's folder away when the pod
goes, so no tmpfs outlives its pod.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
from pathlib import Path
from typing import Any

from agent.volumes.plugin import PluginBase, ReadyVolume, VolumeError, VolumeHost
from kubeclient.quantity import QuantityError, value

MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _limit(container: dict[str, Any]) -> int | None:
    text = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    try:
        return value(text) if text else None
    except QuantityError:
        return None


def pod_memory_limit(pod: dict[str, Any]) -> int:
    """The pod's memory limit as its cgroup gets it (upstream's ResourceConfigForPod): app containers
    (and sidecars) summed, an init container alone if it asks more, plus overhead; 0 when any container
    has no limit."""
    spec = pod.get("spec") or {}
    apps = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    limits = [_limit(c) for c in [*apps, *inits]]
    if not limits or any(limit is None for limit in limits):
        return 0
    total = sum(_limit(c) or 0 for c in apps)
    total += sum(_limit(c) or 0 for c in inits if c.get("restartPolicy") == "Always")
    peak = max((_limit(c) or 0 for c in inits if c.get("restartPolicy") != "Always"), default=0)
    overhead = (spec.get("overhead") or {}).get("memory")
    try:
        extra = value(overhead) if overhead else 0
    except QuantityError:
        extra = 0
    return max(total, peak) + extra


def tmpfs_size(pod: dict[str, Any], volume: dict[str, Any], node_allocatable: int) -> int:
    """Bytes for a memory-backed emptyDir (0: no size option, the kernel's default)."""
    size = node_allocatable
    limit = pod_memory_limit(pod)
    if 0 < limit and (size <= 0 or limit <= size):
        size = limit
    text = (volume.get("emptyDir") or {}).get("sizeLimit")
    try:
        wanted = value(text) if text else 0
    except QuantityError:
        wanted = 0
    if 0 < wanted and (size <= 0 or wanted <= size):
        size = wanted
    return max(size, 0)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        points = [line.split()[4] for line in f if len(line.split()) > 4]
    return [p.encode().decode("unicode_escape") for p in points]


def mount_tmpfs(folder: Path, size: int) -> None:
    """Mount a tmpfs at `folder` (made if missing) unless one is mounted there already."""
    folder.mkdir(parents=True, exist_ok=True)
    if str(folder) in _mount_points():
        return
    options = f"size={size}".encode() if size > 0 else None
    if _libc.mount(b"tmpfs", str(folder).encode(), b"tmpfs", 0, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs at {folder}: {os.strerror(err)}")


def unmount_under(root: Path) -> list[str]:
    """Detach every mount at or below `root`, deepest first; the mount points taken away."""
    prefix = str(root).rstrip("/") + "/"
    points = sorted(
        {p for p in _mount_points() if p == str(root) or p.startswith(prefix)}, key=len, reverse=True
    )
    for point in points:
        if _libc.umount2(point.encode(), MNT_DETACH) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unmount {point}: {os.strerror(err)}")
    return points


def allocatable_memory(allocatable: dict[str, str]) -> int:
    """Bytes of a node's status.allocatable memory (0 when unknown)."""
    try:
        return value(allocatable["memory"]) if allocatable.get("memory") else 0
    except QuantityError:
        return 0


def disk_usage(root: Path) -> int:
    """Bytes the files under `root` occupy (allocated blocks, symlinks not followed, one filesystem),
    as upstream's `du` of a volume counts them."""
    total = 0
    try:
        device = root.lstat().st_dev
    except OSError:
        return 0
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if info.st_dev == device:
                total += info.st_blocks * 512
        dirs[:] = [d for d in dirs if os.lstat(os.path.join(folder, d)).st_dev == device]
    return total


def _make_dir(path: Path, mode: int) -> None:
    """The folder with `mode`, set only when its permission bits differ (upstream's setupDir), so the
    setgid bit fsGroup gave it stays."""
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != mode:
        path.chmod(mode)


class EmptyDirPlugin(PluginBase):
    """A folder of the pod (mode 0777), or a tmpfs for `medium: Memory`; fsGroup applied. The tmpfs goes
    with every other mount under the pod's folder when the manager takes the pod down."""

    kind = "emptyDir"

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        name = volume["name"]
        folder = host.folder(pod, self.kind, name)
        if (volume["emptyDir"] or {}).get("medium") == "Memory":
            size = tmpfs_size(pod, volume, host.node_memory())
            try:
                await asyncio.to_thread(mount_tmpfs, folder, size)
            except OSError as err:
                raise VolumeError(f'MountVolume.SetUp failed for volume "{name}" : {err}') from None
        else:
            await asyncio.to_thread(_make_dir, folder, 0o777)
        await host.own(pod, folder, read_only=False)
        return ReadyVolume(name, self.kind, str(folder), False)
