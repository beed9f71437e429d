"""A work queue with client-go's rules, for controllers: informer handlers add keys, workers take them.

The rules (k8s.io/client-go/util/workqueue) that make level-triggered controllers correct:

- a key is in the queue at most once however often it is added before a worker takes it (`dirty`);
- a key is never given to two workers at once (`processing`); added again while a worker holds it, it
  is remembered and queued once that worker calls `done`, so the newest state is always seen;
- `add_after` delays a key (the earliest of several delays wins); `add_rate_limited` delays it by the
  rate limiter's verdict: per-key exponential backoff (5 ms doubling to 1000 s) and, across keys, a
  10 qps / 100 burst bucket, whichever is longer (client-go's DefaultControllerRateLimiter); `forget`
  resets a key's backoff after a successful sync.

Metrics carry client-go's names (workqueue_depth, workqueue_adds_total, workqueue_retries_total,
workqueue_queue_duration_seconds, workqueue_work_duration_seconds, workqueue_unfinished_work_seconds,
workqueue_longest_running_processor_seconds) with the queue's name as the `name` label.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from kubeclient.ratelimit import TokenBucket

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue is shut down and empty: the worker should return."""


# --- rate limiters --------------------------------------------------------------------------------


class RateLimiter(Protocol):
    def when(self, key: Hashable) -> float: ...
    def forget(self, key: Hashable) -> None: ...
    def num_requeues(self, key: Hashable) -> int: ...


@dataclass
class ItemExponentialFailureRateLimiter:
    """base * 2^failures for each key, capped at `maximum` (client-go: 5 ms to 1000 s)."""

    base: float = 0.005
    maximum: float = 1000.0
    failures: dict[Hashable, int] = field(default_factory=dict)

    def when(self, key: Hashable) -> float:
        n = self.failures.get(key, 0)
        self.failures[key] = n + 1
        return min(self.base * 2.0 ** min(n, 62), self.maximum)

    def forget(self, key: Hashable) -> None:
        self.failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self.failures.get(key, 0)


@dataclass
class BucketRateLimiter:
    """An overall limit across keys: each retry takes a token (client-go: 10 qps, burst 100)."""

    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(10.0, 100))

    def when(self, key: Hashable) -> float:
        return self.bucket.reserve()

    def forget(self, key: Hashable) -> None:
        return None

    def num_requeues(self, key: Hashable) -> int:
        return 0


@dataclass
class MaxOfRateLimiter:
    limiters: tuple[RateLimiter, ...]

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_controller_rate_limiter() -> MaxOfRateLimiter:
    return MaxOfRateLimiter((ItemExponentialFailureRateLimiter(), BucketRateLimiter()))


# --- metrics --------------------------------------------------------------------------------------


class QueueMetrics:
    """client-go's workqueue metrics in a Prometheus registry; one instance per registry. The help texts
    carry "[ALPHA] ", as component-base's workqueue metrics provider registers them in upstream's
    components."""

    _instances: dict[int, QueueMetrics] = {}

    def __init__(self, registry: CollectorRegistry) -> None:
        buckets = tuple(10.0**e for e in range(-8, 2))  # 10 ns .. 10 s, client-go's
        self.depth = Gauge(
            "workqueue_depth", "[ALPHA] Current depth of workqueue", ["name"], registry=registry
        )
        self.adds = Counter(
            "workqueue_adds", "[ALPHA] Total number of adds handled by workqueue", ["name"], registry=registry
        )
        self.retries = Counter(
            "workqueue_retries",
            "[ALPHA] Total number of retries handled by workqueue",
            ["name"],
            registry=registry,
        )
        self.latency = Histogram(
            "workqueue_queue_duration_seconds",
            "[ALPHA] How long in seconds an item stays in workqueue before being requested.",
            ["name"],
            buckets=buckets,
            registry=registry,
        )
        self.work = Histogram(
            "workqueue_work_duration_seconds",
            "[ALPHA] How long in seconds processing an item from workqueue takes.",
            ["name"],
            buckets=buckets,
            registry=registry,
        )
        self.unfinished = Gauge(
            "workqueue_unfinished_work_seconds",
            "[ALPHA] How many seconds of work has done that is in progress and hasn't been observed by work_duration. "
            "Large values indicate stuck threads. One can deduce the number of stuck threads by observing the "
            "rate at which this increases.",
            ["name"],
            registry=registry,
        )
        self.longest = Gauge(
            "workqueue_longest_running_processor_seconds",
            "[ALPHA] How many seconds has the longest running processor for workqueue been running.",
            ["name"],
            registry=registry,
        )

    @classmethod
    def of(cls, registry: CollectorRegistry = REGISTRY) -> QueueMetrics:
        metrics = cls._instances.get(id(registry))
        if metrics is None:
            metrics = cls._instances[id(registry)] = cls(registry)
        return metrics


class _Series:
    """One queue's series of the metrics, labelled once: `labels()` takes a lock and a dict lookup on
    every call, and a queue calls it on every add, get and done (2.7 % of the controller manager's CPU
    in a density run). client-go creates a queue's series when the queue is made, as this does."""

    def __init__(self, metrics: QueueMetrics, name: str) -> None:
        self.depth = metrics.depth.labels(name)
        self.adds = metrics.adds.labels(name)
        self.retries = metrics.retries.labels(name)
        self.latency = metrics.latency.labels(name)
        self.work = metrics.work.labels(name)
        self.unfinished = metrics.unfinished.labels(name)
        self.longest = metrics.longest.labels(name)


# --- the queue ------------------------------------------------------------------------------------


class WorkQueue(Generic[K]):
    def __init__(
        self,
        name: str = "",
        rate_limiter: RateLimiter | None = None,
        metrics: QueueMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._clock = clock
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: dict[K, float] = {}  # key -> when a worker took it
        self._added_at: dict[K, float] = {}
        self._waiting: list[tuple[float, int, K]] = []  # heap of (ready at, seq, key)
        self._ready_at: dict[K, float] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._shutting_down = False
        self._drained = asyncio.Event()
        self._metrics = _Series(metrics, name or "unnamed") if metrics is not None else None

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._added_at.setdefault(key, self._clock())
        if self._metrics:
            self._metrics.adds.inc()
        if key in self._processing:
            return
        self._queue.append(key)
        self._changed()

    def add_after(self, key: K, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        ready = self._clock() + delay
        if key in self._ready_at and self._ready_at[key] <= ready:
            return  # already waiting for an earlier moment
        self._ready_at[key] = ready
        heapq.heappush(self._waiting, (ready, next(self._seq), key))
        self._arm_timer()

    def add_rate_limited(self, key: K) -> None:
        if self._metrics:
            self._metrics.retries.inc()
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)

    async def get(self) -> K:
        """The next key; it is this worker's until `done(key)`. Raises ShutDown once shut down and empty."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown()
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        now = self._clock()
        self._processing[key] = now
        self._dirty.discard(key)
        added = self._added_at.pop(key, now)
        if self._metrics:
            self._metrics.latency.observe(now - added)
        self._update_depth()
        return key

    def done(self, key: K) -> None:
        started = self._processing.pop(key, None)
        if started is not None and self._metrics:
            self._metrics.work.observe(self._clock() - started)
        if key in self._dirty:
            self._queue.append(key)
            self._changed()
        elif not self._processing and self._shutting_down:
            self._drained.set()
            self._wakeup.set()

    def shutdown(self) -> None:
        """No more adds; workers get ShutDown once the queue is empty."""
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
        self._waiting.clear()
        self._ready_at.clear()
        if not self._processing:
            self._drained.set()
        self._wakeup.set()

    async def shutdown_with_drain(self) -> None:
        """Shut down and wait until every key a worker holds is done."""
        self.shutdown()
        await self._drained.wait()

    def observe_unfinished(self) -> None:
        """Refresh the unfinished-work gauges (client-go does it every 500 ms; callers scrape-time)."""
        if not self._metrics:
            return
        now = self._clock()
        ages = [now - t for t in self._processing.values()]
        self._metrics.unfinished.set(sum(ages))
        self._metrics.longest.set(max(ages, default=0.0))

    # --- internals -----------------------------------------------------------------------------------

    def _changed(self) -> None:
        self._update_depth()
        self._wakeup.set()

    def _update_depth(self) -> None:
        if self._metrics:
            self._metrics.depth.set(len(self._queue))

    def _arm_timer(self) -> None:
        if not self._waiting:
            return
        loop = asyncio.get_running_loop()
        ready = self._waiting[0][0]
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(max(ready - self._clock(), 0.0), self._release_due)

    def _release_due(self) -> None:
        self._timer = None
        now = self._clock()
        while self._waiting and self._waiting[0][0] <= now:
            ready, _, key = heapq.heappop(self._waiting)
            if self._ready_at.get(key) == ready:
                del self._ready_at[key]
                self.add(key)
        self._arm_timer()
