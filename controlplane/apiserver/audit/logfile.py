"""The audit log file, rotated by size as upstream's (lumberjack) is: used from one writer thread only.

lumberjack's rules: a write that would take the file past maxsize MB (0: 100 MB) first moves it aside
as `NAME-<UTC 2006-01-02T15-04-05.000>.EXT` and starts a new one (mode 0600, or the old file's); then
backups beyond maxbackup (0: all kept) and older than maxage days (0: no limit) are removed, newest kept.
A single line larger than the limit is refused, as lumberjack refuses such a write."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

MEGABYTE = 1024 * 1024
DEFAULT_MAX_MB = 100
_STAMP = "%Y-%m-%dT%H-%M-%S"


@dataclass
class Rotation:
    max_size_mb: int = 0
    max_backups: int = 0
    max_age_days: int = 0

    @property
    def limit(self) -> int:
        return (self.max_size_mb or DEFAULT_MAX_MB) * MEGABYTE


def backup_name(path: Path, when: datetime) -> Path:
    stamp = when.strftime(_STAMP) + f".{when.microsecond // 1000:03d}"
    return path.with_name(f"{path.stem}-{stamp}{path.suffix}")


class LogFile:
    """Appends lines to PATH (or stdout for "-"), rotating as above."""

    def __init__(self, path: str, rotation: Rotation) -> None:
        self.stdout = path == "-"
        self.path = Path(path)
        self.rotation = rotation
        self._fd = -1
        self._size = 0

    def open(self) -> None:
        """upstream's ensureLogFile: the directory (0700) and the file (0600) exist before serving."""
        if self.stdout:
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size

    def write_lines(self, lines: list[bytes]) -> None:
        if self.stdout:
            sys.stdout.buffer.write(b"".join(lines))
            sys.stdout.buffer.flush()
            return
        limit = self.rotation.limit
        pending: list[bytes] = []
        pending_size = 0
        for line in lines:
            if len(line) > limit:
                raise OSError(f"write length {len(line)} exceeds maximum file size {limit}")
            if self._size + pending_size + len(line) > limit:
                self._write(pending)
                pending, pending_size = [], 0
                self._rotate()
            pending.append(line)
            pending_size += len(line)
        self._write(pending)

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self._size += len(data)

    def _rotate(self) -> None:
        mode = os.fstat(self._fd).st_mode & 0o777
        os.close(self._fd)
        os.rename(self.path, backup_name(self.path, datetime.now(UTC)))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, mode)
        self._size = 0
        self._remove_old()

    def backups(self) -> list[Path]:
        """Backups of this log, newest first (by the time in their names, as lumberjack sorts them)."""
        prefix, ext = self.path.stem + "-", self.path.suffix
        found: list[tuple[datetime, Path]] = []
        for entry in self.path.parent.iterdir():
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(ext)) or entry == self.path:
                continue
            stamp = name[len(prefix) : len(name) - len(ext)]
            try:
                found.append((datetime.strptime(stamp, _STAMP + ".%f"), entry))
            except ValueError:
                continue
        return [p for _, p in sorted(found, reverse=True)]

    def _remove_old(self) -> None:
        backups = self.backups()
        doomed: list[Path] = []
        if self.rotation.max_backups > 0:
            doomed += backups[self.rotation.max_backups :]
            backups = backups[: self.rotation.max_backups]
        if self.rotation.max_age_days > 0:
            cutoff = time.time() - self.rotation.max_age_days * 86400
            doomed += [p for p in backups if _stamp_time(p, self.path) < cutoff]
        for path in doomed:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _stamp_time(backup: Path, path: Path) -> float:
    stamp = backup.name[len(path.stem) + 1 : len(backup.name) - len(path.suffix)]
    return datetime.strptime(stamp, _STAMP + ".%f").replace(tzinfo=UTC).timestamp()
