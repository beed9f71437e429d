"""An event recorder: components say what happened to an object; Events reach the API in the
background, correlated as upstream's recorder does (`kubeclient.eventcorrelator`).

`recorder.event(pod, "Warning", "BackOff", "Back-off restarting failed container")` never blocks and
never fails: the intent goes into a bounded queue (the oldest is dropped when it is full, as upstream's
broadcaster drops under pressure) that sender tasks drain. A repeated event patches the first one's
count; a patch that finds the Event gone (expired, deleted) creates it again, as upstream. Components
whose own writes matter more (the scheduler's bindings) can `hold()` the senders for at most `max_lag`
seconds per event, then `release()`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubeclient.client import MERGE_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventcorrelator import EventCorrelator, Verdict, rfc3339
from kubeclient.eventwait import wait_event
from kubeclient.logsetup import V

log = logging.getLogger("kubeclient.events")

Obj = dict[str, Any]
NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True)
class EventSource:
    """Who reports: `component` (kubelet, default-scheduler, replicaset-controller) on `host`."""

    component: str
    host: str = ""


def object_reference(obj: Obj, field_path: str = "") -> Obj:
    """The ObjectReference of an object, as an Event's involvedObject."""
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


@dataclass
class _Intent:
    verdict: Verdict
    at: float


class EventRecorder:
    def __init__(
        self,
        client: KubeClient | None,
        source: EventSource,
        *,
        reporting_instance: str | None = None,
        workers: int = 1,
        capacity: int = 1000,
        max_lag: float = 0.0,
        correlator: EventCorrelator | None = None,
        clock: Callable[[], float] = time.time,
        verbosity: int = 0,
    ) -> None:
        self.client = client
        # Each event is also logged, at klog verbosity `verbosity` (the broadcaster's
        # StartStructuredLogging(v): 0 for most components, 3 for the kubelet).
        self.log_level = V(verbosity)
        self.source = source
        self.reporting_instance = reporting_instance if reporting_instance is not None else source.host
        self.correlator = correlator or EventCorrelator(clock=clock)
        self.clock = clock
        self.max_lag = max_lag
        self._queue: deque[_Intent] = deque(maxlen=capacity)
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()  # set while nothing more urgent is in flight
        self._open.set()
        self._busy = 0
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0
        # What was said, in order, whatever the correlation made of it: (uid, type, reason, message).
        self.recorded: deque[tuple[str, str, str, str]] = deque(maxlen=10_000)

    # --- recording (synchronous, never fails) --------------------------------------------------------

    def event(
        self, obj: Obj, type_: str, reason: str, message: str, field_path: str = "", action: str = ""
    ) -> None:
        if type_ not in (NORMAL, WARNING):
            log.error("event type %r is not Normal or Warning; dropped reason=%s", type_, reason)
            return
        ref = object_reference(obj, field_path)
        self.recorded.append((ref["uid"], type_, reason, message))
        now = self.clock()
        stamp = rfc3339(now)
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            # Cluster-scoped objects' events go to "default", as upstream's recorder puts them.
            "metadata": {
                "name": f"{ref['name']}.{time.time_ns():x}",
                "namespace": ref.get("namespace") or "default",
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {
                "component": self.source.component,
                **({"host": self.source.host} if self.source.host else {}),
            },
            "reportingComponent": self.source.component,
            "reportingInstance": self.reporting_instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        if action:
            body["action"] = action
        log.log(
            self.log_level,
            "event object=%s/%s kind=%s type=%s reason=%s message=%r",
            ref.get("namespace", ""),
            ref["name"],
            ref["kind"],
            type_,
            reason,
            message,
        )
        verdict = self.correlator.correlate(body)
        if verdict.action == "drop":
            self.dropped += 1
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(_Intent(verdict, time.monotonic()))
        self._ready.set()

    def hold(self) -> None:
        """Something more urgent is in flight: let events wait (each at most `max_lag` seconds)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    # --- sending -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"events-{i}") for i in range(self._workers)]

    async def run(self) -> None:
        """Send until cancelled (for callers that own the task)."""
        self.start()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for task in self._tasks:
                task.cancel()

    async def flush(self) -> None:
        while self._queue or self._busy:
            self._idle.clear()
            await self._idle.wait()

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Send what is queued (up to `flush_timeout`), then stop the senders."""
        if self._tasks:
            try:
                async with asyncio.timeout(flush_timeout):
                    await self.flush()
            except TimeoutError:
                log.warning("events not flushed in time dropped=%d", len(self._queue))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _work(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                if not self._busy:
                    self._idle.set()
                await self._ready.wait()
            intent = self._queue.popleft()
            self._busy += 1
            try:
                lag = intent.at + self.max_lag - time.monotonic()
                if lag > 0 and not self._open.is_set():
                    try:
                        await wait_event(self._open, lag)
                    except TimeoutError:
                        pass
                await self._send(intent.verdict)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                _log_unwritten(intent.verdict.event, err)
            finally:
                self._busy -= 1
                if not self._queue and not self._busy:
                    self._idle.set()

    async def _send(self, verdict: Verdict) -> None:
        if self.client is None:
            return
        written = verdict.target
        assert written is not None
        posted = written.posted
        event = verdict.event
        ns = event["metadata"]["namespace"]
        if verdict.action == "patch":
            await posted.wait()
            try:
                await self.client.patch(
                    f"/api/v1/namespaces/{ns}/events/{written.name}", verdict.patch, content_type=MERGE_PATCH
                )
                return
            except ApiError as err:
                if not err.not_found:
                    raise
            # Gone (expired or deleted): write it again under its name, with the count so far.
        try:
            await self.client.create(f"/api/v1/namespaces/{ns}/events", event)
        except ApiError as err:
            if verdict.action == "create":
                self.correlator.forget_written(verdict.key)
            if not err.already_exists:
                raise
        finally:
            posted.set()


def _log_unwritten(event: dict[str, Any], err: Exception) -> None:
    """An event the server refused is logged whole, at error level, as client-go's broadcaster logs it
    ("Server rejected event (will not retry!)"): the event is often the only account of what failed (a
    controller whose RBAC binding is gone can neither create its pods nor record that it could not, and
    its log is where an operator finds both). An already-existing event is only worth a V(5) line."""
    involved = event.get("involvedObject") or {}
    where = "/".join(p for p in (involved.get("namespace"), involved.get("name")) if p)
    details = (
        f"object={involved.get('kind', '')}:{where} reason={event.get('reason')} "
        f"type={event.get('type')} message={event.get('message')!r}"
    )
    if isinstance(err, ApiError):
        level = V(5) if err.status == 409 else logging.ERROR
        log.log(level, "Server rejected event (will not retry!) err=%s %s", err, details)
        return
    log.warning("event not written error=%s %s", err, details)
