"""volumeMounts[].subPath and subPathExpr, as upstream's makeMounts and pkg/volume/util/subpath treat
them: subPathExpr is expanded with the container's environment (every `$(VAR)` must have a non-empty
value), the result may be neither absolute nor hold a `..` element, a missing folder is made with the
mode of the volume's root, and the path, symlinks followed, must stay inside the volume. Each failure is
upstream's text and keeps the container in CreateContainerConfigError.

What gets bound is the path resolved at start, so a subPath into a configMap volume keeps the file it
had when the container started while the volume itself is updated (upstream's behaviour).
"""

from __future__ import annotations

import os
import re
from typing import Any

_REF = re.compile(r"\$\$|\$\(([^)]*)\)")


class SubPathError(Exception):
    pass


def expand_sub_path_expr(expr: str, env: dict[str, str]) -> str:
    """upstream's ExpandContainerVolumeMounts: `missing value for A, B` when a reference is unknown or
    empty."""
    missing: set[str] = set()

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if not env.get(name):
            missing.add(name)
        return env.get(name, "")

    out = _REF.sub(sub, expr)
    if missing:
        raise SubPathError(f"missing value for {', '.join(sorted(missing))}")
    return out


def sub_path(mount: dict[str, Any], env: dict[str, str]) -> str:
    """The mount's subPath (subPathExpr expanded), checked as upstream's makeMounts checks it."""
    path = mount.get("subPath") or ""
    if mount.get("subPathExpr"):
        path = expand_sub_path_expr(mount["subPathExpr"], env)
    if not path:
        return ""
    if os.path.isabs(path):
        raise SubPathError(f"error SubPath `{path}` must not be an absolute path")
    if ".." in path.replace("\\", "/").split("/"):
        raise SubPathError(f"unable to provision SubPath `{path}`: must not contain '..'")
    return path


def _within(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def prepare(volume_root: str, path: str) -> str:
    """The host path to bind for `path` inside the volume: made (as a folder with the root's mode) when
    missing, symlinks resolved, never outside the volume."""
    base = os.path.realpath(volume_root)
    target = os.path.join(volume_root, path)
    if not os.path.lexists(target):
        mode = os.stat(volume_root).st_mode & 0o7777
        os.makedirs(target, exist_ok=True)
        os.chmod(target, mode)
    resolved = os.path.realpath(target)
    if not _within(resolved, base):
        raise SubPathError(f'subpath "{resolved}" not within volume path "{base}"')
    return resolved
