"""A token bucket: the client-side rate limit upstream clients apply (client-go's QPS and burst; the
kubelet's kubeAPIQPS 50 / kubeAPIBurst 100), and the overall limit of a controller's work queue.

A burst of pod creations makes a component want many writes at once; the bucket lets `burst` go through
at once and then spaces the rest at `qps`, so one component cannot flood the API server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._clock = clock
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def reserve(self) -> float:
        """Take one token now, borrowing from the future if none is left; returns how long the caller
        should wait before acting on it (rate.Limiter.Reserve, as client-go's BucketRateLimiter uses)."""
        if self.qps <= 0:
            return 0.0
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def allow(self) -> bool:
        """Take a token if one is there (rate.Limiter.Allow); a refused caller takes none."""
        if self.qps <= 0:
            return True
        self._refill()
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def acquire(self) -> float:
        """Take one token, waiting if none is left; returns how long it waited."""
        if self.qps <= 0:
            return 0.0
        waited = 0.0
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                delay = (1 - self._tokens) / self.qps
                await asyncio.sleep(delay)
                waited = delay
                self._refill()
            self._tokens -= 1
        return waited
