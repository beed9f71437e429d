"""The scheduling queue: which pending pod to try next, and when to try a failed one again.

Three places, as upstream's PriorityQueue:
- active: ready now, ordered by spec.priority (high first), then by when the pod was first queued;
- backoff: failed recently; becomes active when its backoff (initial * 2^(attempts-1), capped) ends;
- unschedulable: no node fitted and nothing has changed since; a cluster change that could make it fit
  sends it on to backoff or active. As upstream's queueing hints, each change names the plugins it may
  help (`move_all(plugins)`: a node's new label helps NodeAffinity, a deleted pod NodeResourcesFit...)
  and only pods rejected by one of those move. A pod that stays there longer than `flush_after` is
  retried anyway, in case an event was missed.
A change that arrives while a pod is being scheduled counts too (a cluster change, or an update of the
pod itself): the failed pod then goes to backoff, not to unschedulable, so it cannot miss the node that
appeared mid-decision.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from controlplane.scheduler.podinfo import PodInfo
from kubeclient.eventwait import wait_event

ACTIVE, BACKOFF, UNSCHEDULABLE, IN_FLIGHT, GATED = "active", "backoff", "unschedulable", "in-flight", "gated"


@dataclass(slots=True)
class QueuedPod:
    info: PodInfo
    queued_at: float
    attempts: int = 0
    cycle: int = 0  # the scheduling cycle in which it was last popped
    backoff_until: float = 0.0
    parked_at: float = 0.0  # when it entered unschedulable
    where: str = ACTIVE
    seq: int = 0  # identifies its live heap entry; older entries are skipped
    changed_in_flight: bool = False  # its spec changed while it was being decided
    initial_attempt: float = 0.0  # time.monotonic() of its first attempt (the scheduling SLI's start)
    rejected_by: frozenset[str] = frozenset()  # the plugins that rejected it last time (empty: any)


def backoff_duration(attempts: int, initial: float, maximum: float) -> float:
    duration = initial
    for _ in range(1, attempts):
        duration *= 2
        if duration >= maximum:
            return maximum
    return min(duration, maximum)


class SchedulingQueue:
    def __init__(
        self,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        flush_after: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.flush_after = flush_after
        self._clock = clock
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, float, int, str]] = []
        self._backoff: list[tuple[float, int, str]] = []
        self._unschedulable: set[str] = set()
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()
        self.scheduling_cycle = 0
        self._move_cycle = -1
        self._last_flush = clock()

    # what the watch handlers call ----------------------------------------------------------------------
    def add(self, info: PodInfo) -> None:
        """A pending pod was added or updated."""
        qp = self._pods.get(info.uid)
        if qp is None:
            qp = self._pods[info.uid] = QueuedPod(info, self._clock())
            self._place(qp)
            return
        changed = _spec_changed(qp.info, info)
        qp.info = info
        if qp.where == IN_FLIGHT and changed:
            qp.changed_in_flight = True
        elif qp.where == GATED and not info.gated:
            self._place(qp)
        elif qp.where == UNSCHEDULABLE and changed:
            self._unschedulable.discard(info.uid)
            self._after_failure(qp)

    def delete(self, uid: str) -> None:
        qp = self._pods.pop(uid, None)
        if qp is not None:
            self._unschedulable.discard(uid)
            qp.where = ""

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def move_all(self, plugins: frozenset[str] | None = None) -> None:
        """Something changed that could make unschedulable pods fit: retry them (after their backoff).
        With `plugins`, only the pods one of those plugins rejected (the change cannot help others)."""
        self._move_cycle = self.scheduling_cycle
        for uid in list(self._unschedulable):
            qp = self._pods[uid]
            if plugins is None or not qp.rejected_by or qp.rejected_by & plugins:
                self._unschedulable.discard(uid)
                self._after_failure(qp)

    # what the scheduling loop calls -------------------------------------------------------------------
    async def pop(self) -> QueuedPod:
        while True:
            now = self._clock()
            self._flush(now)
            while self._active:
                _, _, seq, uid = heapq.heappop(self._active)
                qp = self._pods.get(uid)
                if qp is None or qp.where != ACTIVE or qp.seq != seq:
                    continue
                qp.where = IN_FLIGHT
                self.scheduling_cycle += 1
                qp.cycle = self.scheduling_cycle
                qp.attempts += 1
                return qp
            self._wakeup.clear()
            timeout = min(self._backoff[0][0] - now, 1.0) if self._backoff else 1.0
            try:
                await wait_event(self._wakeup, max(timeout, 0.001))
            except TimeoutError:
                pass

    def owns(self, qp: QueuedPod) -> bool:
        """Whether `qp` is still this queue's pod (not deleted or replaced since it was popped)."""
        return self._pods.get(qp.info.uid) is qp

    def done(self, uid: str) -> None:
        """The pod got a node (assumed): it leaves the queue."""
        self._pods.pop(uid, None)

    def unschedulable(self, qp: QueuedPod, plugins: frozenset[str] = frozenset()) -> None:
        """No node fitted in this attempt; `plugins` rejected it."""
        if self._pods.get(qp.info.uid) is not qp:
            return  # deleted meanwhile
        qp.rejected_by = plugins
        if self._move_cycle >= qp.cycle or qp.changed_in_flight:
            qp.changed_in_flight = False
            self._after_failure(qp)
        else:
            qp.where = UNSCHEDULABLE
            qp.parked_at = self._clock()
            qp.backoff_until = qp.parked_at + self._backoff_for(qp)
            self._unschedulable.add(qp.info.uid)

    def retry_after_error(self, qp: QueuedPod) -> None:
        """The attempt failed for a reason other than fit (e.g. the binding call failed)."""
        if qp.info.uid not in self._pods:
            self._pods[qp.info.uid] = qp
        self._after_failure(qp)

    def counts(self) -> dict[str, int]:
        out = {ACTIVE: 0, BACKOFF: 0, UNSCHEDULABLE: 0, IN_FLIGHT: 0, GATED: 0}
        for qp in self._pods.values():
            out[qp.where] = out.get(qp.where, 0) + 1
        return out

    # internals ----------------------------------------------------------------------------------------
    def _backoff_for(self, qp: QueuedPod) -> float:
        return backoff_duration(max(qp.attempts, 1), self.backoff_initial, self.backoff_max)

    def _place(self, qp: QueuedPod) -> None:
        if qp.info.gated:
            qp.where = GATED
            return
        qp.where = ACTIVE
        qp.seq = next(self._seq)
        heapq.heappush(self._active, (-qp.info.priority, qp.queued_at, qp.seq, qp.info.uid))
        self._wakeup.set()

    def _after_failure(self, qp: QueuedPod) -> None:
        if qp.backoff_until <= 0 or qp.where != UNSCHEDULABLE:
            qp.backoff_until = self._clock() + self._backoff_for(qp)
        if qp.backoff_until <= self._clock():
            self._place(qp)
            return
        qp.where = BACKOFF
        qp.seq = next(self._seq)
        heapq.heappush(self._backoff, (qp.backoff_until, qp.seq, qp.info.uid))
        self._wakeup.set()

    def _flush(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff)
            qp = self._pods.get(uid)
            if qp is not None and qp.where == BACKOFF and qp.seq == seq:
                self._place(qp)
        if now - self._last_flush >= min(30.0, self.flush_after):
            self._last_flush = now
            for uid in [u for u in self._unschedulable if now - self._pods[u].parked_at >= self.flush_after]:
                self._unschedulable.discard(uid)
                self._place(self._pods[uid])


def _spec_changed(old: PodInfo, new: PodInfo) -> bool:
    """Whether an update could change the outcome (status-only updates, like our own, cannot)."""
    o, n = old.obj, new.obj
    return o.get("spec") != n.get("spec") or (o.get("metadata") or {}).get("labels") != (
        n.get("metadata") or {}
    ).get("labels")
