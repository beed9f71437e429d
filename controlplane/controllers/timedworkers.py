"""Work that runs once, not before a given moment, unless cancelled first (upstream's TimedWorkerQueue in
pkg/controller/tainteviction): the taint eviction controller schedules "delete this pod" for when its
tolerationSeconds run out, and cancels it when the taint goes away in time.

One entry per key (namespace/name). Work due already starts at once and can no longer be cancelled;
its entry stays until it finishes (or is cancelled: then it is only forgotten, as upstream), so the same
pod is not scheduled twice meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("controlplane.controllers")

Work = Callable[[str], Awaitable[None]]


@dataclass
class TimedWorker:
    key: str
    created_at: float  # wall-clock seconds
    fire_at: float
    timer: asyncio.TimerHandle | None  # None once started (or started at once)


class TimedWorkerQueue:
    def __init__(self, work: Work, clock: Callable[[], float] = time.time) -> None:
        self._work = work
        self._clock = clock
        self._workers: dict[str, TimedWorker] = {}
        self._running: set[asyncio.Task[None]] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._workers

    def get(self, key: str) -> TimedWorker | None:
        return self._workers.get(key)

    def add(self, key: str, created_at: float, fire_at: float) -> None:
        """Schedule `key` for `fire_at` unless it is scheduled already."""
        if key in self._workers:
            return
        delay = fire_at - self._clock()
        worker = TimedWorker(key, created_at, fire_at, None)
        self._workers[key] = worker
        if delay <= 0:
            self._start(worker)
        else:
            worker.timer = asyncio.get_running_loop().call_later(delay, self._start, worker)

    def cancel(self, key: str) -> bool:
        """Drop `key`'s work; True if it was waiting (work already started runs to its end)."""
        worker = self._workers.pop(key, None)
        if worker is None or worker.timer is None:
            return False
        worker.timer.cancel()
        return True

    def _start(self, worker: TimedWorker) -> None:
        worker.timer = None
        task = asyncio.create_task(self._run(worker), name=f"timed-work {worker.key}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, worker: TimedWorker) -> None:
        try:
            await self._work(worker.key)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("timed work failed key=%s", worker.key)
        finally:
            if self._workers.get(worker.key) is worker:
                del self._workers[worker.key]

    async def stop(self) -> None:
        """Cancel everything waiting and everything running."""
        for worker in self._workers.values():
            if worker.timer is not None:
                worker.timer.cancel()
        self._workers.clear()
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
