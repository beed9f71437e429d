"""A zone's queue of nodes waiting for a NoExecute taint, drained at a limited rate (upstream's
RateLimitedTimedQueue in pkg/controller/nodelifecycle/scheduler).

Taints drive evictions (the taint eviction controller deletes the pods), so limiting how fast nodes get
tainted limits how fast a failing zone loses its pods: by default 0.1 nodes a second with a burst of 1.
A node is queued once: after it was tainted it stays known (so it is not tainted again every pass)
until `remove` (the node is healthy again, or its taint went away). A rate of 0 stops all tainting.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kubeclient.ratelimit import TokenBucket

BURST = 1


@dataclass(order=True)
class TimedValue:
    process_at: float
    seq: int
    value: str = field(compare=False)
    uid: str = field(compare=False)
    added_at: float = field(compare=False)


class EvictionQueue:
    def __init__(self, qps: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[TimedValue] = []
        self._queued: dict[str, TimedValue] = {}  # in the heap
        self._known: set[str] = set()  # queued, or processed and not yet removed
        self._seq = itertools.count()
        self.qps = qps
        self._limiter = self._bucket(qps)

    def _bucket(self, qps: float) -> TokenBucket | None:
        return TokenBucket(qps, BURST, self._clock) if qps > 0 else None

    def _accept(self) -> bool:
        return self._limiter is not None and self._limiter.allow()

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, value: str) -> bool:
        return value in self._known

    def add(self, value: str, uid: str) -> bool:
        """Queue a node; False if it is already known."""
        if value in self._known:
            return False
        now = self._clock()
        item = TimedValue(now, next(self._seq), value, uid, now)
        self._known.add(value)
        self._queued[value] = item
        heapq.heappush(self._heap, item)
        return True

    def remove(self, value: str) -> bool:
        """Forget a node entirely; True if it was known."""
        self._queued.pop(value, None)
        if value not in self._known:
            return False
        self._known.discard(value)
        return True

    def clear(self) -> None:
        self._heap.clear()
        self._queued.clear()
        self._known.clear()

    def _head(self) -> TimedValue | None:
        while self._heap:
            item = self._heap[0]
            if self._queued.get(item.value) is item:
                return item
            heapq.heappop(self._heap)  # removed or replaced since
        return None

    async def try_each(self, fn: Callable[[TimedValue], Awaitable[tuple[bool, float]]]) -> None:
        """Process due nodes while the limiter allows: `fn` returns (done, retry after seconds); a node
        not done is tried again after that delay."""
        item = self._head()
        while item is not None:
            if not self._accept():
                return
            now = self._clock()
            if now < item.process_at:
                return
            done, wait = await fn(item)
            if self._queued.get(item.value) is not item:
                item = self._head()  # removed (or re-added) while fn ran
                continue
            del self._queued[item.value]
            if not done:
                retry = TimedValue(now + wait + 1e-9, next(self._seq), item.value, item.uid, item.added_at)
                self._queued[item.value] = retry
                heapq.heappush(self._heap, retry)
            item = self._head()

    def swap_limiter(self, qps: float) -> None:
        """A new rate; switching while the old bucket is empty leaves the new one empty too (burst 1)."""
        if qps == self.qps:
            return
        new = self._bucket(qps)
        if new is not None and not self._accept():
            new.allow()
        self.qps = qps
        self._limiter = new
