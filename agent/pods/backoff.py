"""Restart and image-pull backoff, with upstream's rules: the first retry is immediate, then 10 s doubling
up to 300 s; an entry untouched for twice the maximum (10 min of clean running) starts over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Entry:
    delay: float
    last: float


class BackoffTable:
    def __init__(self, initial: float = 10.0, maximum: float = 300.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[tuple[str, ...], _Entry] = {}

    def _live(self, key: tuple[str, ...], now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and now - entry.last > 2 * self.maximum:
            del self._entries[key]
            return None
        return entry

    def remaining(self, key: tuple[str, ...]) -> float:
        """Seconds until a retry is allowed (0 when allowed now)."""
        now = self.clock()
        entry = self._live(key, now)
        if entry is None:
            return 0.0
        return max(0.0, entry.last + entry.delay - now)

    def delay(self, key: tuple[str, ...]) -> float:
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def next(self, key: tuple[str, ...]) -> float:
        """Record an attempt now; returns the delay that must pass before the one after it."""
        now = self.clock()
        entry = self._live(key, now)
        if entry is None:
            entry = self._entries[key] = _Entry(self.initial, now)
        else:
            entry.delay = min(entry.delay * 2, self.maximum)
            entry.last = now
        return entry.delay

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k[0] == prefix]:
            del self._entries[key]


def format_go_duration(seconds: float) -> str:
    """10 -> "10s", 80 -> "1m20s", 300 -> "5m0s" (as Go prints time.Duration)."""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{secs}s"
