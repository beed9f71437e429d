"""Events about pods (Scheduled, FailedScheduling), written off the scheduling path.

Events are for people reading `kubectl describe`; they must never slow a decision or a binding down,
so they go into a bounded queue drained by a few workers, and while bindings are in flight the workers
hold each event back for up to MAX_LAG seconds (the API server's time goes to bindings first; under
sustained load events simply trail by MAX_LAG). When the queue is full the oldest intent is dropped
(upstream's recorder also drops under pressure). A repeated FailedScheduling with the same message for
the same pod bumps the count of the existing Event instead of creating a new one, as upstream's
correlator does, so a pod retried every 10 s does not grow an event per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controlplane.scheduler.client import ApiClient, ApiError

log = logging.getLogger(__name__)

COMPONENT = "default-scheduler"
MAX_LAG = 2.0  # seconds an event may wait for the bindings in flight to finish


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Intent:
    pod: dict[str, Any]
    type: str
    reason: str
    action: str
    message: str
    at: float


class EventRecorder:
    def __init__(self, client: ApiClient, workers: int = 8, capacity: int = 10_000,
                 component: str = COMPONENT) -> None:
        self.client = client
        self.component = component
        self.instance = f"{component}-{socket.gethostname()}-{os.getpid()}"
        self._queue: deque[_Intent] = deque(maxlen=capacity)
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._open = asyncio.Event()  # set while nothing more urgent (a binding) is in flight
        self._open.set()
        self._busy = 0
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        # (pod uid, reason) -> (event namespace, event name, message, count)
        self._last: dict[tuple[str, str], tuple[str, str, str, int]] = {}

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"events-{i}") for i in range(self._workers)]

    async def stop(self, flush_timeout: float = 5.0) -> None:
        """Send what is queued (up to `flush_timeout`), then stop the workers."""
        try:
            await asyncio.wait_for(self.flush(), flush_timeout)
        except TimeoutError:
            log.warning("events not flushed in time dropped=%d", len(self._queue))
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def flush(self) -> None:
        while self._queue or self._busy:
            self._idle.clear()
            await self._idle.wait()

    def record(self, pod: dict[str, Any], type_: str, reason: str, action: str, message: str) -> None:
        self._queue.append(_Intent(pod, type_, reason, action, message, time.monotonic()))
        self._ready.set()

    def hold(self) -> None:
        """Something more urgent is in flight: let events wait (at most MAX_LAG)."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def forget(self, uid: str) -> None:
        for key in [k for k in self._last if k[0] == uid]:
            del self._last[key]

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
                lag = intent.at + MAX_LAG - time.monotonic()
                if lag > 0 and not self._open.is_set():
                    try:
                        await asyncio.wait_for(self._open.wait(), lag)
                    except TimeoutError:
                        pass
                await self._send(intent)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.warning("event not written reason=%s error=%s", intent.reason, err)
            finally:
                self._busy -= 1
                if not self._queue and not self._busy:
                    self._idle.set()

    async def _send(self, intent: _Intent) -> None:
        meta = intent.pod.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        uid = str(meta.get("uid") or "")
        stamp = now_rfc3339()
        last = self._last.get((uid, intent.reason))
        if last is not None and last[2] == intent.message:
            ev_ns, ev_name, _, count = last
            try:
                await self.client.request(
                    "PATCH", f"/api/v1/namespaces/{ev_ns}/events/{ev_name}",
                    {"count": count + 1, "lastTimestamp": stamp},
                    content_type="application/merge-patch+json")
                self._last[(uid, intent.reason)] = (ev_ns, ev_name, intent.message, count + 1)
                return
            except ApiError as err:
                if err.status != 404:
                    raise
        name = f"{meta.get('name')}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": meta.get("name"),
                               "uid": uid, "resourceVersion": meta.get("resourceVersion")},
            "reason": intent.reason,
            "message": intent.message,
            "type": intent.type,
            "action": intent.action,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self.client.request("POST", f"/api/v1/namespaces/{ns}/events", body)
        if intent.reason != "Scheduled":
            self._last[(uid, intent.reason)] = (ns, name, intent.message, 1)
