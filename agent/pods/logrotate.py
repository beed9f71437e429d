"""Container log rotation, as upstream's container log manager does it.

containerd appends to a container's CRI log file forever; the kubelet watches the sizes (every 10 s)
and when one passes containerLogMaxSize it renames the file to `<log>.<timestamp>`, asks the runtime to
reopen its log (ReopenContainerLog), gzips older rotated files and keeps at most containerLogMaxFiles
in all. A failed reopen renames the file back, so no output is ever lost to a dangling file handle.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.cri import CRIClient, CRIError, pb

log = logging.getLogger("agent.pods.logrotate")


@dataclass(frozen=True)
class RotationPolicy:
    max_size: int = 10 * 2**20  # containerLogMaxSize 10Mi
    max_files: int = 5  # containerLogMaxFiles
    period: float = 10.0


def rotated_files(log_path: str) -> list[Path]:
    """Earlier files of this log, oldest first (their names sort by timestamp)."""
    path = Path(log_path)
    if not path.parent.is_dir():
        return []
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name + "."))


def _rotate_file(log_path: str) -> Path | None:
    path = Path(log_path)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S.%f")  # sorts in time order, even within a second
    target = path.with_name(f"{path.name}.{stamp}")
    try:
        os.rename(path, target)
    except FileNotFoundError:
        return None
    return target


def _compress_and_trim(log_path: str, max_files: int, newest: Path) -> None:
    for old in rotated_files(log_path):
        if old == newest or old.suffix == ".gz":
            continue
        with open(old, "rb") as src, gzip.open(str(old) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        old.unlink()
    files = rotated_files(log_path)
    # The live file counts as one of max_files.
    for old in files[: max(0, len(files) - (max_files - 1))]:
        old.unlink(missing_ok=True)


def _sizes(paths: dict[str, str]) -> dict[str, int]:
    out = {}
    for cid, path in paths.items():
        if not path:
            continue
        try:
            out[cid] = os.stat(path).st_size
        except OSError:
            continue
    return out


class LogRotator:
    def __init__(self, cri: CRIClient, policy: RotationPolicy | None = None) -> None:
        self.cri = cri
        self.policy = policy or RotationPolicy()
        self.rotations = 0
        self._paths: dict[str, str] = {}

    async def rotate_once(self) -> int:
        """One pass over running containers; returns how many logs were rotated."""
        done = 0
        running = await self.cri.list_containers(state=pb.CONTAINER_RUNNING)
        # A container's log path never changes: ask for it once, then only stat the file.
        self._paths = {c.id: self._paths[c.id] for c in running if c.id in self._paths}
        for c in running:
            if c.id not in self._paths:
                try:
                    self._paths[c.id] = (await self.cri.container_status(c.id)).status.log_path
                except CRIError:
                    continue
        sizes = await asyncio.to_thread(_sizes, self._paths)
        for cid, size in sizes.items():
            if size >= self.policy.max_size and await self._rotate(cid, self._paths[cid]):
                done += 1
        self.rotations += done
        return done

    async def _rotate(self, container_id: str, log_path: str) -> bool:
        rotated = await asyncio.to_thread(_rotate_file, log_path)
        if rotated is None:
            return False
        try:
            await self.cri.reopen_container_log(container_id)
        except CRIError as err:
            await asyncio.to_thread(os.rename, rotated, log_path)
            log.warning(
                "log reopen failed, rotation undone container=%s error=%r", container_id[:13], str(err)
            )
            return False
        await asyncio.to_thread(_compress_and_trim, log_path, self.policy.max_files, rotated)
        log.info("container log rotated container=%s path=%s", container_id[:13], log_path)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.policy.period)
            try:
                await self.rotate_once()
            except CRIError as err:
                log.debug("log rotation pass failed error=%r", str(err))
            except Exception:
                log.exception("log rotation pass crashed")
