"""Restart and image-pull backoff, as upstream's flowcontrol.Backoff (no jitter, as the kubelet uses it):
the first try is free, then 10 s doubling up to 300 s; an entry whose event came more than twice the
maximum (10 min) after its last update starts over.

Two ways of asking, as upstream has:
- crash-loop backoff (`in_backoff_since`, `next(key, event)`): the window is counted from the event, the
  container's exit (finishedAt), so a container that ran for a while before crashing still waits its
  window after the crash; ten minutes of running between the last restart and the exit start over.
- pull backoff (`remaining`, `next(key)`): the window is counted from the last failed try.
The crash-loop key names the container's hash (upstream's GetStableKey), so a container whose image was
fixed starts at once instead of serving the old container's window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class _Entry:
    backoff: float
    last_update: float


def stable_key(pod: dict[str, Any], container: dict[str, Any], container_hash: str) -> tuple[str, ...]:
    """upstream's GetStableKey: pod name, namespace, UID, container name and hash (the UID first, so a
    pod's entries can be forgotten together)."""
    meta = pod["metadata"]
    return (meta["uid"], meta["name"], meta["namespace"], container["name"], container_hash)


class BackoffTable:
    def __init__(
        self, initial: float = 10.0, maximum: float = 300.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock
        self._entries: dict[tuple[str, ...], _Entry] = {}

    def _expired(self, event: float, entry: _Entry) -> bool:
        """upstream's hasExpired: stable for twice the maximum since the last update."""
        return event - entry.last_update > 2 * self.maximum

    def delay(self, key: tuple[str, ...]) -> float:
        """The current window (upstream's Get): what `back-off 20s restarting ...` names."""
        entry = self._entries.get(key)
        return entry.backoff if entry else 0.0

    def next(self, key: tuple[str, ...], event: float | None = None) -> float:
        """Record a try now (upstream's Next): a new or expired entry starts at the initial window,
        else the window doubles up to the maximum. `event` is when what is retried happened (the
        container's exit), now if not given. Returns the new window."""
        now = self.clock()
        entry = self._entries.get(key)
        if entry is None or self._expired(now if event is None else event, entry):
            entry = self._entries[key] = _Entry(self.initial, now)
        else:
            entry.backoff = min(entry.backoff * 2, self.maximum)
            entry.last_update = now
        return entry.backoff

    def in_backoff_since(self, key: tuple[str, ...], event: float) -> bool:
        """Whether less than the window has passed since `event` (upstream's IsInBackOffSince)."""
        return self.remaining_since(key, event) > 0

    def remaining_since(self, key: tuple[str, ...], event: float) -> float:
        """Seconds until the window counted from `event` has passed (0: not in backoff)."""
        entry = self._entries.get(key)
        if entry is None or self._expired(event, entry):
            return 0.0
        return max(0.0, event + entry.backoff - self.clock())

    def remaining(self, key: tuple[str, ...]) -> float:
        """Seconds until the window counted from the last try has passed (upstream's
        IsInBackOffSinceUpdate, for image pulls)."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        now = self.clock()
        if self._expired(now, entry):
            return 0.0
        return max(0.0, entry.last_update + entry.backoff - now)

    def forget_prefix(self, prefix: str) -> None:
        for key in [k for k in self._entries if k[0] == prefix]:
            del self._entries[key]

    def gc(self) -> None:
        """Drop entries stable for twice the maximum (upstream's GC, from housekeeping)."""
        now = self.clock()
        for key in [k for k, e in self._entries.items() if self._expired(now, e)]:
            del self._entries[key]


def format_go_duration(seconds: float) -> str:
    """10 -> "10s", 80 -> "1m20s", 300 -> "5m0s" (as Go prints a whole-second time.Duration)."""
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{secs}s"
