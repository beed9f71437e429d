"""fsGroup on a pod's volumes, as upstream's SetVolumeOwnership (pkg/volume/volume_linux.go): every file
and folder of the volume gets the group, read (and, unless the volume is read-only, write) for the
group, folders also search and the setgid bit, so files created later belong to the group too.
Symlinks get the group but keep their mode. With fsGroupChangePolicy OnRootMismatch the walk is skipped
when the volume's root already has the group and those bits, as upstream skips it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

RW_MASK = 0o660
RO_MASK = 0o440
EXEC_MASK = 0o110


def _needs_change(root: Path, gid: int, read_only: bool) -> bool:
    """upstream's requiresPermissionChange."""
    try:
        info = root.stat()
    except OSError:
        return True
    if info.st_gid != gid or not stat.S_ISDIR(info.st_mode):
        return True
    want = (RO_MASK if read_only else RW_MASK) | EXEC_MASK
    return (info.st_mode & want) != want or not info.st_mode & stat.S_ISGID


def _change(path: str, gid: int, read_only: bool) -> None:
    os.lchown(path, -1, gid)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return
    mask = RO_MASK if read_only else RW_MASK
    if stat.S_ISDIR(info.st_mode):
        mask |= stat.S_ISGID | EXEC_MASK
    os.chmod(path, stat.S_IMODE(info.st_mode) | mask)


def set_ownership(root: Path, gid: int, read_only: bool, policy: str = "") -> bool:
    """Apply fsGroup `gid` under `root`; False when OnRootMismatch found nothing to do."""
    if policy == "OnRootMismatch" and not _needs_change(root, gid, read_only):
        return False
    for folder, dirs, files in os.walk(root):
        _change(folder, gid, read_only)
        for name in [*dirs, *files]:
            path = os.path.join(folder, name)
            if os.path.islink(path) or name in files:
                _change(path, gid, read_only)
    return True
