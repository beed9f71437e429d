"""A token bucket: the client-side rate limit upstream clients apply (kubeAPIQPS 50, kubeAPIBurst 100).

A burst of pod creations makes the agent want many writes at once; the bucket lets `burst` go through at
once and then spaces the rest at `qps`, so the agent cannot flood the API server.
"""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._tokens = float(self.burst)
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

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
