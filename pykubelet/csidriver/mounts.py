"""Bind mounts for the host-path CSI driver (mount(2) and umount2(2) through libc): staging binds the
volume's folder at the staging path, publishing binds that at the target (read-only when asked)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def is_mount_point(path: str) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        points = {line.split()[4].encode().decode("unicode_escape") for line in f if len(line.split()) > 4}
    return os.path.realpath(path) in points


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def bind(source: str, target: str, read_only: bool = False) -> None:
    """Bind `source` at `target` (made if missing); nothing to do when `target` is a mount already."""
    os.makedirs(target, exist_ok=True)
    if is_mount_point(target):
        return
    _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None), f"bind {source} at {target}")
    if read_only:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        _check(_libc.mount(b"none", target.encode(), None, flags, None), f"remount {target} read-only")


def unbind(target: str) -> None:
    """Take the mount at `target` away (if any) and remove the folder."""
    if os.path.isdir(target) and is_mount_point(target):
        _check(_libc.umount2(target.encode(), 0), f"unmount {target}")
    if os.path.isdir(target):
        os.rmdir(target)
