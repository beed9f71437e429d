"""usageNanoCores from two samples of a cumulative CPU counter, as upstream's CRI stats provider
computes it (cpuUsageCache in cri_stats_provider.go): the first sample of a key, a counter that went
backwards (a restarted container) or a non-increasing timestamp give None; otherwise the rate since the
previous sample. A sample taken within MIN_INTERVAL of the previous one (two scrapers at once) answers
the rate already known instead of a noisy one over a few milliseconds. Keys not seen for
STALE_AFTER are dropped, so removed containers do not grow the cache."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MIN_INTERVAL = 0.1  # seconds
STALE_AFTER = 120.0  # seconds, upstream's defaultCachePeriod for the cpu usage cache


@dataclass
class _Record:
    timestamp_ns: int
    usage_ns: int
    rate: int | None
    seen: float


class CpuRates:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._records: dict[str, _Record] = {}
        self._clock = clock

    def update(self, key: str, timestamp_ns: int, usage_ns: int) -> int | None:
        """The usage in nano cores since the last sample of `key`, or None when it cannot be known."""
        now = self._clock()
        last = self._records.get(key)
        if last is None or usage_ns < last.usage_ns:
            self._records[key] = _Record(timestamp_ns, usage_ns, None, now)
            return None
        interval = timestamp_ns - last.timestamp_ns
        last.seen = now
        if interval <= 0:
            return last.rate
        if interval < MIN_INTERVAL * 1e9 and last.rate is not None:
            return last.rate
        rate = int((usage_ns - last.usage_ns) / interval * 1e9)
        self._records[key] = _Record(timestamp_ns, usage_ns, rate, now)
        return rate

    def sweep(self) -> None:
        cutoff = self._clock() - STALE_AFTER
        for key in [k for k, r in self._records.items() if r.seen < cutoff]:
            del self._records[key]

    def __len__(self) -> int:
        return len(self._records)
