"""The Retry-After a 429 carries, per priority level (upstream's DroppedRequestsTracker): it starts at
1 s and, like TCP's congestion window in reverse, doubles (up to 32 s) while a level keeps dropping at
least 3 requests per second of the current value, and shrinks by 1 s a second once it drops fewer than
that many; it is reconsidered each time a new second sees a drop."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_RETRY_AFTER = 32


@dataclass
class _Drops:
    retry_after: int = 1
    updated_at: int = 0  # the second retry_after last grew
    second: int = 0
    count: int = 0
    history: deque[tuple[int, int]] = field(default_factory=deque)  # (second, drops) before `second`

    def record(self, now: int) -> None:
        if now == self.second:
            self.count += 1
            return
        self.history.append((self.second, self.count))
        horizon = min(2 * self.retry_after, MAX_RETRY_AFTER)
        while self.history and self.second - self.history[0][0] > horizon:
            self.history.popleft()
        self.second, self.count = now, 1
        self._adjust(now)

    def _adjust(self, now: int) -> None:
        recent = sum(n for t, n in self.history if now - t <= self.retry_after and t < now)
        if now - self.updated_at >= self.retry_after and recent >= 3 * self.retry_after:
            self.retry_after = min(2 * self.retry_after, MAX_RETRY_AFTER)
            self.updated_at = now
        elif recent < self.retry_after and self.retry_after > 1:
            self.retry_after -= 1


class DroppedRequests:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._levels: dict[str, _Drops] = {}

    def record(self, level: str) -> int:
        """Note a drop at `level`; the Retry-After seconds to answer it with."""
        drops = self._levels.get(level)
        if drops is None:
            drops = self._levels[level] = _Drops()
        drops.record(int(self.clock()))
        return drops.retry_after
