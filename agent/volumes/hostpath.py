"""hostPath volumes: a path of the host bound into containers as it is, its `type` checked (or the
folder or file made, for DirectoryOrCreate and FileOrCreate) with upstream's message on a mismatch."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent.volumes.plugin import PluginBase, ReadyVolume, VolumeError, VolumeHost


def host_path(src: dict[str, Any], volume: str) -> str:
    path, kind = src["path"], src.get("type") or ""
    p = Path(path)
    if kind == "DirectoryOrCreate":
        p.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        p.parent.mkdir(parents=True, exist_ok=True)
        p.touch(exist_ok=True)
    checks = {
        "Directory": p.is_dir,
        "File": p.is_file,
        "Socket": p.is_socket,
        "CharDevice": p.is_char_device,
        "BlockDevice": p.is_block_device,
    }
    if kind in checks and not checks[kind]():
        raise VolumeError(
            f'MountVolume.SetUp failed for volume "{volume}" : hostPath type check failed: {path} is not a {kind.lower()}'
        )
    return path


class HostPathPlugin(PluginBase):
    kind = "hostPath"

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        path = await asyncio.to_thread(host_path, volume["hostPath"], volume["name"])
        return ReadyVolume(volume["name"], self.kind, path, False)
