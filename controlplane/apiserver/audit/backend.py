"""The log backend: requests hand events to a buffer; one task takes what has gathered (up to a batch)
and writes it in a worker thread, so the event loop never waits on a disk.

--audit-log-mode blocking (upstream's default for the log): no event is lost; a request that finds the
buffer over its size waits until the writer has caught up (a slow disk slows the requests, as upstream's
blocking backend does). batch: as upstream's buffered backend, a full buffer drops the event with an
error in the server log rather than stall the request. Shutdown writes everything buffered before
closing."""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.audit.logfile import LogFile

if TYPE_CHECKING:
    from controlplane.apiserver.audit.webhook import WebhookSink

log = logging.getLogger("controlplane.apiserver.audit")

BUFFER_SIZE = 10_000  # upstream's --audit-log-batch-buffer-size default
MAX_BATCH = 400  # upstream's batch backend's max batch size
_STOP = object()


def encode_line(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


MODES = ("blocking", "blocking-strict", "batch")  # --audit-log-mode; upstream's default is blocking


class BufferedBackend:
    def __init__(
        self,
        out: LogFile | WebhookSink,
        buffer_size: int = BUFFER_SIZE,
        max_batch: int = MAX_BATCH,
        mode: str = "blocking",
        truncate_at: int = 0,
    ) -> None:
        self.out = out
        self.max_batch = max_batch
        self.buffer_size = buffer_size
        # blocking (and blocking-strict): no event is ever dropped; a request whose events find the
        # buffer over its size waits (`room`) until the writer has caught up, as upstream's blocking mode
        # holds the response. batch: a full buffer drops the event, as upstream's batch backend.
        self.blocking = mode != "batch"
        # --audit-*-truncate-enabled with --audit-*-truncate-max-event-size (0: off).
        self.truncate_at = truncate_at
        self.truncated_away = 0
        self._queue: asyncio.Queue[Any] = asyncio.Queue(0 if self.blocking else buffer_size)
        self._drained = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-log")
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.failed = 0  # events whose write failed
        self.written = 0

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self.out.open)
        self._task = asyncio.create_task(self._run(), name="audit-log-writer")

    async def room(self) -> None:
        """In blocking mode, until the buffer is back within its size (the request's events are then
        on their way to the disk); at once otherwise."""
        while self.blocking and self._task is not None and self._queue.qsize() > self.buffer_size:
            self._drained.clear()
            await self._drained.wait()

    def process(self, event: dict[str, Any]) -> None:
        """Never blocks the caller: the event is buffered (in batch mode dropped, and counted, when the
        buffer is full)."""
        if self.truncate_at:
            truncated = truncate(event, self.truncate_at)
            if truncated is None:
                self.truncated_away += 1
                return
            event = truncated
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.error("event=audit-dropped count=%d cause=%s", self.dropped, "audit buffer queue blocked")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = False
        while not stopping:
            batch: list[dict[str, Any]] = []
            item = await self._queue.get()
            while True:
                if item is _STOP:  # queued after every event that preceded the stop
                    stopping = True
                    break
                batch.append(item)
                if len(batch) >= self.max_batch or self._queue.empty():
                    break
                item = self._queue.get_nowait()
            if batch:
                try:
                    if hasattr(self.out, "send"):  # the webhook: an HTTP POST, on the loop
                        await self.out.send(batch)
                    else:
                        await loop.run_in_executor(self._executor, self._write, batch)
                    self.written += len(batch)
                except OSError as err:
                    self.failed += len(batch)
                    log.error("event=audit-write-failed count=%d cause=%s", len(batch), err)
            if self._queue.qsize() <= self.buffer_size:
                self._drained.set()

    def _write(self, batch: list[dict[str, Any]]) -> None:
        self.out.write_lines([encode_line(e) for e in batch])

    async def stop(self) -> None:
        """Everything buffered is written, then the file is closed."""
        if self._task is not None:
            await self._queue.put(_STOP)
            await self._task
            self._task = None
        await asyncio.get_running_loop().run_in_executor(self._executor, self.out.close)
        if hasattr(self.out, "aclose"):
            await self.out.aclose()
        self._executor.shutdown(wait=True)

    def failures(self) -> dict[str, int]:
        """apiserver_audit_error_total by plugin: the buffer's drops, the writer's failures."""
        return {
            "buffered": self.dropped,
            getattr(self.out, "plugin", "log"): self.failed,
            "truncate": self.truncated_away,
        }


TRUNCATED = "audit.k8s.io/truncated"
MAX_EVENT_SIZE = 102_400  # upstream's --audit-*-truncate-max-event-size default


def truncate(event: dict[str, Any], limit: int) -> dict[str, Any] | None:
    """Upstream's truncate plugin: an event over `limit` bytes loses its request and response objects
    (annotated `audit.k8s.io/truncated: "true"`); one still over it is dropped (None)."""
    if len(encode_line(event)) <= limit:
        return event
    slim = {k: v for k, v in event.items() if k not in ("requestObject", "responseObject")}
    slim["annotations"] = {**(event.get("annotations") or {}), TRUNCATED: "true"}
    return slim if len(encode_line(slim)) <= limit else None


class Backends:
    """Every configured backend (the log, the webhook) gets every event."""

    def __init__(self, backends: list[BufferedBackend]) -> None:
        self.backends = backends

    async def start(self) -> None:
        for b in self.backends:
            await b.start()

    async def stop(self) -> None:
        for b in self.backends:
            await b.stop()

    def process(self, event: dict[str, Any]) -> None:
        for b in self.backends:
            b.process(event)

    async def room(self) -> None:
        for b in self.backends:
            await b.room()

    def failures(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.backends:
            for plugin, n in b.failures().items():
                out[plugin] = out.get(plugin, 0) + n
        return out
