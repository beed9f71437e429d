"""Watches: a stream of ADDED/MODIFIED/DELETED events from the watch cache, with bookmarks (periodic,
before timeoutSeconds ends, and the `k8s.io/initial-events-end` one after sendInitialEvents), a 410
ERROR for a resourceVersion the window no longer holds, and the watcher released as soon as its client
is gone. A watch from a resourceVersion the cache has not reached starts at once and delivers only what
comes after it (upstream's cacher); sendInitialEvents=false sends no initial events. Events are written
from the cache's encoded bytes unless the kind converts or a Table is asked for."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors, fieldselect, listoptions, tables
from controlplane.apiserver.kinds.base import Kind, SelectableField
from controlplane.apiserver.metrics import METRICS_KEY, WatchRecorder
from controlplane.apiserver.protobuf.codec import message_for
from controlplane.apiserver.protobufhttp import WATCH_CONTENT_TYPE, ProtobufWatchWriter, prefers_protobuf
from controlplane.apiserver.request import RequestInfo, bool_param, int_param
from controlplane.apiserver.responses import (
    out_raw,
    partial,
    revision,
    too_large,
    wants_metadata,
    wants_table,
)
from controlplane.storage.cache import (
    CLOSED,
    GoneError,
    TooLargeResourceVersionError,
    Trigger,
    WatchCache,
    encode,
)

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler

Obj = dict[str, Any]
log = logging.getLogger("controlplane.apiserver")

BOOKMARK_INTERVAL = 60.0
DISCONNECT_CHECK = 5.0  # how often an idle watch looks whether its client is still there
WRITE_BATCH = 64  # queued events written at once, at most


async def serve_watch(rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
    """GET with watch=true: the events of a collection (or one object) from a resourceVersion on."""
    res = info.resource
    q = request.query
    predicate, one_name = rest.predicate(request, res)
    # The field value the selector requires, by which the cache routes events to this watch.
    trigger: Trigger | None = getattr(predicate, "trigger", None)
    if info.name:
        one_name = info.name
        base = predicate
        predicate = lambda o: o["metadata"].get("name") == info.name and (base is None or base(o))  # noqa: E731
        trigger = trigger or fieldselect.field_trigger(SelectableField("metadata.name"), info.name)
    rv = q.get("resourceVersion", "")
    bookmarks = bool_param(q, "allowWatchBookmarks")
    listoptions.check(q, watch=True)
    initial = q.get("sendInitialEvents")
    send_initial = str(initial).lower() == "true"
    # sendInitialEvents=false: no synthetic ADDED events, whatever the resourceVersion (upstream's
    # watch cache starts such a watch at its current revision for "" and "0")
    no_initial = initial is not None and not send_initial
    timeout = float(int_param(q, "timeoutSeconds") or random.uniform(1800, 3600))
    key_prefix = (
        res.key(info.namespace, one_name)
        if one_name and (info.namespace or not res.namespaced)
        else res.prefix(info.namespace)
    )
    from_revision: int | None
    error_status: Obj | None = None
    try:
        if send_initial:
            if rv == "":
                await rest.cache.wait_consistent()
            elif rv != "0":
                await rest.cache.wait_for(revision(rv))
            from_revision = None
        elif rv in ("", "0"):
            if rv == "":
                await rest.cache.wait_consistent()
            from_revision = rest.cache.revision if no_initial else None
        else:
            # A resourceVersion the cache has not reached yet starts the watch at once: upstream's cacher
            # opens it and delivers only what comes after that version.
            from_revision = revision(rv)
    except TooLargeResourceVersionError as err:
        raise too_large(err) from None
    watcher = None
    try:
        watcher = rest.cache.watch(res.bucket, key_prefix, predicate, from_revision, trigger)
    except GoneError as err:
        error_status = errors.gone(f"too old resource version: {err.requested} ({err.oldest})").status()
    initial_count = watcher.queue.qsize() if (watcher and send_initial) else -1
    initial_rv = rest.cache.revision
    mode = "table" if wants_table(request) else "metadata" if wants_metadata(request) else "object"
    protobuf = mode != "table" and prefers_protobuf(request.headers.get("Accept", ""))
    # custom resources have no protobuf form (JSON, as upstream); their metadata-only form has one
    protobuf = protobuf and (mode == "metadata" or message_for(res.api_version, res.kind) is not None)
    content_type = WATCH_CONTENT_TYPE if protobuf else "application/json"
    response = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    out: Any = ProtobufWatchWriter(response) if protobuf else response
    metrics = request.get(METRICS_KEY)
    if metrics is not None:
        out = _CountedWriter(out, metrics.watch_recorder(res.group, res.version, res.kind))
    rest.active_watches += 1
    alarm = _Alarm(asyncio.get_running_loop())
    try:
        if error_status is not None or watcher is None:
            await out.write(encode({"type": "ERROR", "object": error_status}) + b"\n")
            return response
        await _pump(
            request,
            out,
            watcher,
            res,
            rest.cache,
            mode,
            request.query.get("includeObject", "Metadata"),
            bookmarks,
            timeout,
            initial_count,
            initial_rv,
            alarm,
        )
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        alarm.cancel()
        rest.active_watches -= 1
        if watcher is not None:
            watcher.close()
    with contextlib.suppress(ConnectionResetError, RuntimeError):
        await response.write_eof()
    return response


async def _pump(
    request: web.Request,
    response: web.StreamResponse | ProtobufWatchWriter | _CountedWriter,
    watcher: Any,
    res: Kind,
    cache: WatchCache,
    mode: str,
    include: str,
    bookmarks: bool,
    duration: float,
    initial_count: int,
    initial_rv: int,
    alarm: _Alarm,
) -> None:
    deadline = time.monotonic() + duration
    next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
    sent_headers = False
    sent = 0
    plain = mode == "object" and not res.converts  # each line from the cache's bytes, nothing awaited
    if initial_count == 0:
        await response.write(_bookmark(res, initial_rv, True))
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return  # the client went away: release the watcher now, not at the next event
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            # Late (a busy server): still end with the bookmark the client asked for.
            if bookmarks and watcher.queue.empty():
                await response.write(_bookmark(res, cache.revision, False))
            return
        wait = min(remaining, next_bookmark - now) if bookmarks else remaining
        # Upstream sends a last bookmark shortly before a watch with timeoutSeconds ends.
        if bookmarks and remaining > 1:
            wait = min(wait, remaining - 1 if remaining > 2 else remaining)
        wait = min(wait, DISCONNECT_CHECK)
        try:
            event = await alarm.next(watcher, max(wait, 0.01))
        except TimeoutError:
            if bookmarks and (time.monotonic() >= next_bookmark or deadline - time.monotonic() <= 1.5):
                if watcher.queue.empty():
                    await response.write(_bookmark(res, cache.revision, False))
                next_bookmark = time.monotonic() + BOOKMARK_INTERVAL
                if deadline - time.monotonic() <= 1.5:
                    await asyncio.sleep(max(deadline - time.monotonic(), 0))
                    return
            continue
        # The events already queued go out in one write (one TLS record and one send for a burst of
        # them, not one each); the stream's bytes are the same.
        lines: list[bytes] = []
        while event is not CLOSED:
            try:
                if plain:
                    line = _object_line(event.type, event.obj.raw)
                else:
                    line = await _event_line(event, res, cache, mode, include, not sent_headers)
            except errors.ApiError as err:
                # A conversion webhook failed: upstream's watch handler ends the stream (the client's
                # relist then gets the 500).
                log.warning("event=watch-conversion-failed resource=%s error=%s", res.plural, err.message)
                event = CLOSED
                break
            sent_headers = True
            lines.append(line)
            sent += 1
            if sent == initial_count:
                lines.append(_bookmark(res, initial_rv, True))
            if len(lines) >= WRITE_BATCH or watcher.queue.empty():
                break
            event = watcher.queue.get_nowait()
        if lines:
            await _send(response, lines)
        if event is CLOSED:
            return


async def _event_line(
    event: Any, res: Kind, cache: WatchCache, mode: str, include: str, headers: bool
) -> bytes:
    """One event as its JSON line: the cache's encoded object unless the kind converts or another form
    (Table, metadata only) is asked for."""
    if mode == "table":
        shown = await res.table_forms([event.obj.obj], cache)
        obj = tables.table(res, shown, include, headers=headers)
        return encode({"type": event.type, "object": obj}) + b"\n"
    if mode == "metadata":
        return encode({"type": event.type, "object": partial(event.obj.obj)}) + b"\n"
    return _object_line(event.type, await _served_raw(res, event.obj, cache))


_HEADS = {t: b'{"type":"' + t.encode() + b'","object":' for t in ("ADDED", "MODIFIED", "DELETED")}


def _object_line(event_type: str, raw: bytes) -> bytes:
    """`{"type":T,"object":RAW}` and a newline: the line of an event whose object is sent as encoded."""
    return b"".join((_HEADS[event_type], raw, b"}\n"))


class _Alarm:
    """What the pump waits on: the watcher's next queued item, or the alarm of its next check (bookmark,
    end, a look at the connection). One timer stands until it rings, however many events come before
    (an `asyncio.timeout` and a `Queue.get` per event cost more than the write of most events); it may
    ring early for a later bound, which only makes the pump look again."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.timer: asyncio.TimerHandle | None = None
        self.waiter: asyncio.Future[None] | None = None

    async def next(self, watcher: Any, wait: float) -> Any:
        """The next queued item; TimeoutError when the alarm rang first."""
        queue = watcher.queue
        if not queue.empty():
            return queue.get_nowait()
        if self.timer is None:
            self.timer = self.loop.call_later(wait, self._ring)
        self.waiter = watcher.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = watcher.waiter = None
        if not queue.empty():
            return queue.get_nowait()
        raise TimeoutError

    def _ring(self) -> None:
        self.timer = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def _send(out: Any, lines: list[bytes]) -> None:
    if isinstance(out, _CountedWriter):
        await out.write_lines(lines)
    else:
        await out.write(b"".join(lines))


class _CountedWriter:
    """Writes a watch's events, each counted into apiserver_watch_events_total and _sizes."""

    def __init__(self, inner: Any, recorder: WatchRecorder) -> None:
        self.inner, self.recorder = inner, recorder

    async def write(self, data: bytes) -> None:
        await self.inner.write(data)
        self.recorder.sent(len(data))

    async def write_lines(self, lines: list[bytes]) -> None:
        """Several events in one write, each counted."""
        await self.inner.write(b"".join(lines))
        for line in lines:
            self.recorder.sent(len(line))


async def _served_raw(res: Kind, cached: Any, cache: WatchCache) -> bytes:
    if res.converts:
        return encode((await res.served_forms([cached.obj], cache))[0])
    return out_raw(res, cached)


def _bookmark(res: Kind, rv: int, initial_end: bool) -> bytes:
    meta: Obj = {"resourceVersion": str(rv), "creationTimestamp": None}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return (
        encode(
            {
                "type": "BOOKMARK",
                "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta},
            }
        )
        + b"\n"
    )
