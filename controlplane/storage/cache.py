"""The watch cache: the current state of every object plus a retained window of recent events.

Upstream's apiserver keeps one of these per resource so that thousands of watchers and resourceVersion=0
lists never touch etcd; we do the same in front of any `Store`. Objects are kept decoded *and* encoded:
a write is encoded once and every watcher and list reuses the bytes, which is what makes 1 000 watchers
and 10 000-item lists cheap. Keys look like `/<bucket>/<namespace>/<name>` or `/<bucket>/<name>`, the
bucket being the resource (`pods`, `deployments.apps`); each bucket has its own event window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from controlplane.storage.encoding import Unversioned, encode
from controlplane.storage.interface import CompactedError, Event, Store

log = logging.getLogger("controlplane.storage.cache")
# Back-off between attempts to open the store's watch again (seconds; the last repeats), as a reflector
# backs off after a failed watch.
_FEED_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Predicate = Callable[[dict[str, Any]], bool]
# The longest stretch (seconds) the watch feed applies events before the event loop serves others.
APPLY_SLICE = 0.005
# The longest a write waits for the watch cache (seconds) before going on without it: a read-modify-write
# then reads the store, a create's admission reads the cache as it is (upstream waits for neither: its
# GuaranteedUpdate reads etcd when its copy is stale, its admission plugins read informers as they are).
# Most of the time the feed is a moment behind and the wait ends at once; on a loaded server the feed lags
# seconds, and a longer wait made every create wait that long.
WRITE_PATIENCE = 0.1
# This server's writes remembered for their watch events at most (a write that failed after etcd
# committed it, or a value the store transformed, never comes back as the bytes it was handed).
_HANDED_KEPT = 4096


def bucket_of(key: str) -> str:
    return key.split("/", 2)[1]


Viewer = Callable[[dict[str, Any]], dict[str, Any]]


def full_view(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


@dataclass(slots=True)
class CachedObject:
    """One object version. `raw` (with its resourceVersion) is what lists and watches send; `view` is
    what selectors look at: by default the whole object, or a slim projection when the cache was given
    a viewer (a decoded pod costs ~12 KB against ~2 KB encoded). `obj` decodes a fresh full copy."""

    key: str
    raw: bytes
    revision: int
    view: dict[str, Any]

    @classmethod
    def from_value(cls, key: str, value: bytes, revision: int, viewer: Viewer = full_view) -> CachedObject:
        return cls.decoded_from_value(key, value, revision, viewer)[0]

    @classmethod
    def decoded_from_value(
        cls, key: str, value: bytes, revision: int, viewer: Viewer = full_view
    ) -> tuple[CachedObject, dict[str, Any]]:
        """`from_value`, and the object it decoded (with its resourceVersion; the view may be it)."""
        obj = json.loads(value)
        obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
        return cls(key, encode(obj), revision, viewer(obj)), obj

    @property
    def obj(self) -> dict[str, Any]:
        return json.loads(self.raw)

    @classmethod
    def from_written(
        cls, key: str, written: Unversioned, revision: int, viewer: Viewer
    ) -> CachedObject | None:
        """The same as `from_value` of the written bytes, from the object that was encoded into them
        (None when that cannot be done exactly: no metadata, or a viewer that keeps the whole object,
        which would share the writer's dicts)."""
        raw = written.versioned(revision)
        if raw is None:
            return None
        obj = written.versioned_obj(revision)
        view = viewer(obj)
        if view is obj:
            return None
        return cls(key, raw, revision, json.loads(encode(view)))  # a copy: the writer keeps its object

    def at_revision(self, revision: int) -> CachedObject:
        """This object's state, as a later revision's event carries it."""
        obj = self.obj
        obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
        return CachedObject(self.key, encode(obj), revision, self.view)


@dataclass(slots=True)
class _Handed:
    """A write of this server on its way back through the store's watch: what it stored, and the view
    of the object taken when it was handed over."""

    written: Unversioned
    view: dict[str, Any]


@dataclass(slots=True)
class CacheEvent:
    type: EventType
    obj: CachedObject
    prev: CachedObject | None
    revision: int
    # While in-process subscribers are called: the object decoded, when this server's write handed it
    # over (read only; never kept: the event window holds events long after). None: decode obj.raw.
    decoded: dict[str, Any] | None = None


class GoneError(Exception):
    """The requested resourceVersion is older than the retained window (becomes 410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class TooLargeResourceVersionError(Exception):
    """The requested resourceVersion is newer than anything stored, even after waiting."""

    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"Too large resource version: {requested}, current: {current}")
        self.requested = requested
        self.current = current


CLOSED = None  # queued to a watcher when the cache drops it (too slow or shutting down)


@dataclass(frozen=True, slots=True)
class Trigger:
    """A value one field must have for a watcher's selector to match (upstream's indexed trigger: a
    kubelet's pod watch with spec.nodeName=X). The cache offers such a watcher only the events whose
    object has that value now or had it before (entering or leaving the selection), so with 1 000
    per-node watchers a pod's event is weighed by its node's watcher alone, not by 1 000. Exact: the
    selector holds `value_of(view) == value` as a conjunct, so every event skipped is one it would have
    dropped. `field` keys the index (watchers of one field share it); `value_of` reads the field from a
    cached object's view as the selector does."""

    field: Hashable
    value_of: Callable[[dict[str, Any]], str]
    value: str


@dataclass(eq=False)
class Watcher:
    """One watch stream's view: events it matches, in revision order, delivered through `queue`."""

    bucket: str
    key_prefix: str
    predicate: Predicate | None
    queue: asyncio.Queue[CacheEvent | None]
    cache: WatchCache
    closed: bool = False
    # Highest revision handed to the queue; with an empty queue the watcher has seen everything up
    # to the cache's revision, which is what a bookmark may promise.
    last_revision: int = 0
    # A watch from a resourceVersion the cache has not reached: nothing at or below it is delivered.
    after: int = 0
    # The field value the selector requires, by which the cache indexes the watcher (None: offered all).
    trigger: Trigger | None = None
    # Set by a consumer waiting for the queue to fill (a future, cheaper than a Queue.get per event):
    # resolved with the next item queued.
    waiter: asyncio.Future[None] | None = None

    def matches(self, cached: CachedObject | None) -> bool:
        if cached is None or not cached.key.startswith(self.key_prefix):
            return False
        return self.predicate is None or self.predicate(cached.view)

    def offer(self, event: CacheEvent) -> None:
        if event.revision <= self.after:
            return
        new_ok = event.type != "DELETED" and self.matches(event.obj)
        old_ok = self.matches(event.prev) if event.type != "ADDED" else False
        if event.type == "DELETED":
            old_ok = self.matches(event.obj)
            if not old_ok:
                return
            out = event
        elif new_ok and old_ok:
            # The event itself when its type stands (most): one object shared by every watcher.
            out = (
                event
                if event.type == "MODIFIED"
                else CacheEvent("MODIFIED", event.obj, event.prev, event.revision)
            )
        elif new_ok:
            out = (
                event if event.type == "ADDED" else CacheEvent("ADDED", event.obj, event.prev, event.revision)
            )
        elif old_ok and event.prev is not None:
            # It left the selection: upstream's cacheWatcher sends DELETED with the previous state (the
            # state that matched), at the event's resourceVersion.
            out = CacheEvent("DELETED", event.prev.at_revision(event.revision), event.prev, event.revision)
        else:
            return
        self._put(out)

    def _put(self, event: CacheEvent) -> None:
        if self.closed:
            return
        if self.queue.full():
            self.close()
            return
        self.queue.put_nowait(event)
        self.last_revision = event.revision
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.cache._remove(self)
            # Make room for the end marker: the stream ends and the client resumes from the last
            # resourceVersion it saw, which the window replays.
            while True:
                try:
                    self.queue.put_nowait(CLOSED)
                    break
                except asyncio.QueueFull:
                    self.queue.get_nowait()
            self._wake()


@dataclass(slots=True)
class _Index:
    """The watchers of one trigger field, by the value their selector requires."""

    value_of: Callable[[dict[str, Any]], str]
    by_value: dict[str, set[Watcher]] = field(default_factory=dict)

    def candidates(self, event: CacheEvent) -> list[Watcher]:
        """The watchers whose value the event's object has, or had before it (one that left)."""
        value = self.value_of(event.obj.view)
        found = list(self.by_value.get(value, ()))
        if event.prev is not None:
            before = self.value_of(event.prev.view)
            if before != value:
                found += self.by_value.get(before, ())
        return found


@dataclass
class _Bucket:
    objects: dict[str, CachedObject] = field(default_factory=dict)
    events: deque[CacheEvent] = field(default_factory=deque)
    # Watches may resume from any revision >= window_start.
    window_start: int = 0
    window: int = 10_000  # events kept (the cache's window, or --watch-cache-sizes' for this resource)
    watchers: set[Watcher] = field(default_factory=set)
    # The same watchers split by how they are reached: offered every event, or through a trigger index.
    unindexed: set[Watcher] = field(default_factory=set)
    indexes: dict[Hashable, _Index] = field(default_factory=dict)
    # In-process readers kept in step with every commit, before any watcher or reader sees it.
    subscribers: list[Callable[[CacheEvent], None]] = field(default_factory=list)

    def add(self, watcher: Watcher) -> None:
        self.watchers.add(watcher)
        trigger = watcher.trigger
        if trigger is None:
            self.unindexed.add(watcher)
            return
        index = self.indexes.get(trigger.field)
        if index is None:
            index = self.indexes[trigger.field] = _Index(trigger.value_of)
        index.by_value.setdefault(trigger.value, set()).add(watcher)

    def discard(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        self.unindexed.discard(watcher)
        trigger = watcher.trigger
        index = self.indexes.get(trigger.field) if trigger is not None else None
        if index is None or trigger is None:
            return
        same = index.by_value.get(trigger.value)
        if same is not None:
            same.discard(watcher)
            if not same:
                del index.by_value[trigger.value]
                if not index.by_value:
                    del self.indexes[trigger.field]

    def fan_out(self, event: CacheEvent) -> None:
        """Offer an event to every watcher that may want it (a watcher closed meanwhile is skipped)."""
        for watcher in list(self.unindexed):
            watcher.offer(event)
        for index in list(self.indexes.values()):
            for watcher in index.candidates(event):
                watcher.offer(event)


class WatchCache:
    """Feeds itself from `store.watch` and serves current state, windowed history and fan-out."""

    def __init__(
        self,
        store: Store,
        window: int = 10_000,
        watcher_queue: int = 10_000,
        viewer: Viewer = full_view,
        windows: dict[str, int] | None = None,
    ) -> None:
        self.store = store
        self.viewer = viewer
        self.window = window
        # Per-resource windows by bucket name ("pods", "deployments.apps"): --watch-cache-sizes.
        self.windows = dict(windows or {})
        self.watcher_queue = watcher_queue
        self._buckets: dict[str, _Bucket] = {}
        self.revision = 0
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # Every bucket holds all events after this revision until its window overflows.
        self._floor = 0
        # The object a write of this server is storing, while the store commits it (`expecting`).
        self._expected: Unversioned | None = None
        # On a store whose commits come back through a watch (etcd): this server's writes by their
        # stored bytes, and by the written object's id, until their events arrive (`expecting`).
        self._handed: dict[bytes, _Handed] = {}
        self._handed_objs: dict[int, _Handed] = {}

    def _bucket(self, name: str) -> _Bucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = _Bucket(
                window_start=self._floor, window=self.windows.get(name, self.window)
            )
        return bucket

    async def start(self) -> None:
        """Load the state as of now: the window starts at this revision, as upstream's cache starts from
        its initial list, so a watch from an older resourceVersion (a watcher of the previous server
        process) gets 410 and relists, as on a genuine cluster, rather than a replay of the store's
        history."""
        current = self.store.revision
        history = getattr(self.store, "history", None)
        subscribe = getattr(self.store, "subscribe", None)
        base = current
        try:
            items, rev, _ = await self.store.list("/", base)
        except CompactedError:
            items, rev, _ = await self.store.list("/")
        self._floor = rev
        self.revision = rev
        for kv in items:
            self._bucket(bucket_of(kv.key)).objects[kv.key] = CachedObject.from_value(
                kv.key, kv.value, kv.mod_revision, self.viewer
            )
        if history is not None and base < current:
            for event in history(base):
                self._apply(event)
        if subscribe is not None:
            # An in-process store tells us about each commit synchronously.
            subscribe(self._apply)
        else:
            self._task = asyncio.create_task(self._feed(rev), name="watch-cache-feed")
            # Serve nothing older than the store was at start: the replay of (base, current] comes first.
            await self.wait_for(current, patience=60.0)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for bucket in self._buckets.values():
            for watcher in list(bucket.watchers):
                watcher.close()

    async def _feed(self, from_revision: int) -> None:
        """Apply the store's events for as long as the server runs. Like upstream's cacher (a reflector
        under it), a watch that ends for any reason is opened again from the last applied revision after
        a back-off, and one that fell behind a compaction relists: the cache is never left stale for good,
        whatever broke the stream (meanwhile reads that need freshness time out rather than serve old
        data)."""
        failures = 0
        while True:
            try:
                async for batch in self.store.watch(from_revision):
                    failures = 0
                    await self._apply_batch(batch)
                    from_revision = self.revision
                return
            except asyncio.CancelledError:
                raise
            except CompactedError as err:
                # The watch fell behind a compaction (etcd away for longer than a compaction round, or
                # etcd's own auto-compaction): relist and go on from there, as an informer does.
                log.warning("event=watch-cache-relist from=%d compacted=%d", from_revision, err.compacted)
                try:
                    from_revision = await self._relist()
                except asyncio.CancelledError:
                    raise
                except Exception as relist_err:  # retried below, as the watch is
                    failures = await self._back_off(failures, relist_err)
            except Exception as err:  # any broken watch is opened again
                from_revision = self.revision
                failures = await self._back_off(failures, err)

    async def _apply_batch(self, batch: list[Event]) -> None:
        """A store watch's batch (etcd sends hundreds of events in one response when writes come fast),
        applied without holding the event loop for long: once a stretch has run `APPLY_SLICE` seconds
        the feed lets the loop serve others, only ever between two revisions, so a reader never sees
        part of one revision's changes."""
        started = time.perf_counter()
        previous = -1
        for event in batch:
            if event.revision != previous and time.perf_counter() - started > APPLY_SLICE:
                await asyncio.sleep(0)
                started = time.perf_counter()
            previous = event.revision
            self._apply(event)

    async def _back_off(self, failures: int, err: BaseException) -> int:
        delay = _FEED_BACKOFF[min(failures, len(_FEED_BACKOFF) - 1)]
        log.warning(
            "event=watch-cache-feed-broken revision=%d retry_in=%.1f err=%s", self.revision, delay, err
        )
        await asyncio.sleep(delay)
        return failures + 1

    async def _relist(self) -> int:
        """Replace every bucket's state with a fresh list. Watchers are closed (they resume from their
        resourceVersion, older than the new window: 410, and relist); in-process subscribers are told
        the differences, so their indexes stay in step. Returns the list's revision."""
        items, rev, _ = await self.store.list("/")
        fresh: dict[str, dict[str, CachedObject]] = {}
        for kv in items:
            cached = CachedObject.from_value(kv.key, kv.value, kv.mod_revision, self.viewer)
            fresh.setdefault(bucket_of(kv.key), {})[kv.key] = cached
        for name in set(self._buckets) | set(fresh):
            bucket = self._bucket(name)
            new = fresh.get(name, {})
            for watcher in list(bucket.watchers):
                watcher.close()
            changes = [
                CacheEvent("DELETED", old, old, rev) for key, old in bucket.objects.items() if key not in new
            ]
            for key, cached in new.items():
                prev = bucket.objects.get(key)
                if prev is None or prev.revision != cached.revision:
                    changes.append(CacheEvent("MODIFIED" if prev else "ADDED", cached, prev, rev))
            bucket.objects = new
            bucket.events.clear()
            bucket.window_start = rev
            for change in changes:
                for subscriber in bucket.subscribers:
                    subscriber(change)
        self._floor = rev
        self.revision = max(self.revision, rev)
        self._wake()
        return rev

    def _apply(self, event: Event) -> None:
        if event.type == "PROGRESS":
            if event.revision > self.revision:
                self.revision = event.revision
                self._wake()
            return
        bucket = self._bucket(bucket_of(event.key))
        prev = bucket.objects.get(event.key)
        cached, decoded = self._own_write(event) if event.type != "DELETE" else (None, None)
        if cached is None:
            cached, decoded = CachedObject.decoded_from_value(
                event.key, event.value, event.revision, self.viewer
            )
        if event.type == "DELETE":
            bucket.objects.pop(event.key, None)
            ce = CacheEvent("DELETED", cached, prev, event.revision)
        else:
            bucket.objects[event.key] = cached
            ce = CacheEvent("MODIFIED" if prev is not None else "ADDED", cached, prev, event.revision)
        self.revision = event.revision
        if bucket.subscribers:
            ce.decoded = decoded
            for subscriber in bucket.subscribers:
                subscriber(ce)
            ce.decoded = None
        bucket.events.append(ce)
        if len(bucket.events) > bucket.window:
            dropped = bucket.events.popleft()
            # Upstream's cache serves a watch from one before its oldest event on.
            bucket.window_start = bucket.events[0].revision - 1 if bucket.events else dropped.revision
        bucket.fan_out(ce)
        if self._waiters:
            self._wake()

    def _own_write(self, event: Event) -> tuple[CachedObject | None, dict[str, Any] | None]:
        """The copy of a write this server handed over (`expecting`), spliced from its bytes, and the
        object for subscribers when the writer's is still as written (an in-process store's commit);
        (None, None) for anything else."""
        expected = self._expected
        if expected is not None and expected.value is event.value:
            self._expected = None
            cached = CachedObject.from_written(event.key, expected, event.revision, self.viewer)
            return cached, expected.versioned_obj(event.revision) if cached is not None else None
        handed = self._handed.get(event.value) if self._handed else None
        if handed is None:
            return None, None
        self._forget(handed)
        raw = handed.written.versioned(event.revision)
        return (None if raw is None else CachedObject(event.key, raw, event.revision, handed.view)), None

    @contextlib.contextmanager
    def expecting(self, written: Unversioned) -> Iterator[None]:
        """While the store commits `written.value`: an in-process store tells the cache of the commit
        with these very bytes (the same object), and the cache then takes its copy from the written
        object instead of decoding and encoding the value again. A store that tells the cache through a
        watch (etcd) brings the commit back later, as equal bytes: the write is remembered by them, with
        its view taken now (the writer may change its object once the write returns), and its event's
        copy is spliced from them. Any other event (another server's write, a transformed value, a
        write that failed here yet committed) is read from its bytes as always."""
        self._expected = written
        handed = self._hand_over(written) if self._task is not None else None
        try:
            yield
        except BaseException:
            if handed is not None:
                self._forget(handed)
            raise
        finally:
            if self._expected is written:
                self._expected = None

    def _hand_over(self, written: Unversioned) -> _Handed | None:
        """Remember a write whose event the store's watch will bring (None: its event is decoded, as
        `from_written` would not take it either: no metadata, or a view that is the whole object)."""
        if written.meta_end < 0:
            return None
        view = self.viewer(written.obj)
        if view is written.obj:
            return None
        for table in (self._handed, self._handed_objs):
            if len(table) >= _HANDED_KEPT:  # events that never came back as these bytes
                self._forget(next(iter(table.values())))
        handed = _Handed(written, json.loads(encode(view)))
        self._handed[written.value] = self._handed_objs[id(written.obj)] = handed
        return handed

    def _forget(self, handed: _Handed) -> None:
        if self._handed.get(handed.written.value) is handed:
            del self._handed[handed.written.value]
        if self._handed_objs.get(id(handed.written.obj)) is handed:
            del self._handed_objs[id(handed.written.obj)]

    def written_raw(self, key: str, obj: dict[str, Any], revision: int) -> bytes | None:
        """The encoding, with its resourceVersion, of `obj` as this server's write stored it at
        `revision`: the cache's copy once it holds that version, else (etcd's event still on its way)
        the same splice of the write's bytes. None when neither is known (a dry run, another object)."""
        cached = self.get(key)
        if cached is not None and cached.revision == revision:
            return cached.raw
        handed = self._handed_objs.get(id(obj))
        if handed is None or handed.written.obj is not obj:
            return None
        return handed.written.versioned(revision)

    async def wait_for(self, revision: int, patience: float = 3.0) -> None:
        """Wait until the cache has applied `revision` (consistent reads, watches from the future)."""
        if self.revision >= revision:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (revision, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(patience):
                await future
        except TimeoutError:
            raise TooLargeResourceVersionError(revision, self.revision) from None
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _wake(self) -> None:
        for revision, future in self._waiters:
            if revision <= self.revision and not future.done():
                future.set_result(None)

    async def wait_fresh(self, key: str | None = None, patience: float = 3.0) -> None:
        """Wait for every change this server knows of (its own writes; for one server on a store, all).
        With `key`, on a store that tracks its writes by key (etcd's), only for this server's last write
        of that key: enough for a read-modify-write of one object, which learns of any newer change from
        its write's conflict, and it no longer waits for the watch to bring back the writes of every
        other request in flight (with 500 renewals a second, each one waited for the others').
        TooLargeResourceVersionError after `patience`."""
        await self.wait_for(self._fresh_target(key), patience)

    def _fresh_target(self, key: str | None) -> int:
        """The revision `wait_fresh(key)` waits for: this server's last write of `key` where the store
        tracks writes by key (0 when the cache holds it already), else every change it knows of."""
        written = getattr(self.store, "key_revision", None) if key is not None else None
        return written(key, self.revision) if written is not None else self.store.revision

    async def get_for_update(self, key: str, patience: float = WRITE_PATIENCE) -> CachedObject | None:
        """The copy of `key` a read-modify-write starts from: the cache's, once it holds this server's
        last write of the key (what `wait_fresh` waits for). When the watch lags further behind than
        `patience` (a loaded server), the key is read from the store itself instead, as upstream's
        GuaranteedUpdate reads etcd when its cached copy is stale: a write never waits long, nor is it
        refused, only because the cache is slow (upstream does not wait for its cache at all; a short
        wait saves the store read when the feed is a moment behind, which is most of the time)."""
        target = self._fresh_target(key)
        if self.revision >= target:  # most calls: nothing to wait for, no timer set up
            return self.get(key)
        try:
            await self.wait_for(target, patience)
        except TooLargeResourceVersionError:
            kv = await self.store.get(key)
            return (
                None
                if kv is None
                else CachedObject.from_value(kv.key, kv.value, kv.mod_revision, self.viewer)
            )
        return self.get(key)

    async def read_through(self, key: str) -> CachedObject | None:
        """The key as the store holds it now (on etcd a linearizable read): upstream's Cacher.Get with
        resourceVersion "" reads etcd and never waits for the watch cache, whose feed may lag hundreds of
        revisions behind on a loaded server (the wait was most of a single GET's p99 at 1 000 nodes). The
        cached copy is answered when it is that very version (nothing decoded), else the store's value."""
        kv = await self.store.get(key)
        if kv is None:
            return None
        cached = self.get(key)
        if cached is not None and cached.revision == kv.mod_revision:
            return cached
        return CachedObject.from_value(kv.key, kv.value, kv.mod_revision, self.viewer)

    async def wait_consistent(self, patience: float = 0.25, bound: float = 5.0) -> None:
        """Wait until the cache holds every write acknowledged anywhere before this call, also through
        another API server on the same etcd: upstream's consistent read from the cache. The store says
        its current revision (a linearizable read) and the cache waits for its watch to get there. A
        store without `current_revision` has no other writer: `wait_fresh`.

        The revision may have been spent outside the watched prefix (the compactor's key), so that no
        event will ever bring the cache to it; etcd 3.4 has no reliable on-demand progress notification
        (etcd issue 15220). After `patience` without the watch bringing anything, the store is asked
        whether anything under the prefix changed since the cache's revision; if not, the cache is current
        up to the target (as after a progress notification). While the watch is bringing events the cache
        is on its way (a loaded server's feed lags): that question, which makes etcd read every key under
        the prefix, is not asked then (its answer would be "changed" but for the last stretch of the way,
        which the next quiet wait asks about), and the wait goes on. Past
        `bound`, TooLargeResourceVersionError (a 504 above), never a stale answer."""
        current = getattr(self.store, "current_revision", None)
        if current is None:
            await self.wait_fresh()
            return
        target = await current()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        while self.revision < target:
            before = self.revision
            try:
                await self.wait_for(target, min(patience, max(deadline - loop.time(), 0.0)))
                return
            except TooLargeResourceVersionError:
                if loop.time() >= deadline:
                    raise
            if self.revision > before:
                continue  # the feed moved: wait on rather than have etcd scan the prefix
            held, count = self.revision, sum(len(b.objects) for b in self._buckets.values())
            live = await self.store.live_count_if_unchanged(held, target)  # type: ignore[attr-defined]
            if live == count and self.revision == held:
                self._apply(Event("PROGRESS", "", b"", target, 0, None))
            patience *= 2

    def get(self, key: str) -> CachedObject | None:
        bucket = self._buckets.get(bucket_of(key))
        return bucket.objects.get(key) if bucket else None

    def list(
        self, bucket_name: str, key_prefix: str, predicate: Predicate | None = None
    ) -> list[CachedObject]:
        bucket = self._buckets.get(bucket_name)
        if bucket is None:
            return []
        out = [
            c
            for k, c in bucket.objects.items()
            if k.startswith(key_prefix) and (predicate is None or predicate(c.view))
        ]
        out.sort(key=lambda c: c.key)
        return out

    def watch(
        self,
        bucket_name: str,
        key_prefix: str,
        predicate: Predicate | None,
        from_revision: int | None,
        trigger: Trigger | None = None,
    ) -> Watcher:
        """Register a watcher. `from_revision=None` means synthetic ADDED events for current state first.
        `trigger`: a field value `predicate` requires, by which live events are routed to the watcher.

        Registration is synchronous so no event can slip between the replay and the live feed.
        """
        bucket = self._bucket(bucket_name)
        initial = self.list(bucket_name, key_prefix, predicate) if from_revision is None else []
        queue: asyncio.Queue[CacheEvent | None] = asyncio.Queue(self.watcher_queue + len(initial))
        watcher = Watcher(bucket_name, key_prefix, predicate, queue, self, trigger=trigger)
        if from_revision is None:
            for cached in initial:
                watcher._put(CacheEvent("ADDED", cached, None, cached.revision))
        else:
            if from_revision < bucket.window_start:
                raise GoneError(from_revision, bucket.window_start)
            for event in bucket.events:
                if event.revision > from_revision:
                    watcher.offer(event)
        watcher.last_revision = self.revision
        if from_revision is not None and from_revision > self.revision:
            watcher.after = from_revision
        bucket.add(watcher)
        return watcher

    def subscribe(self, bucket_name: str, callback: Callable[[CacheEvent], None]) -> list[CachedObject]:
        """Call `callback` synchronously with every change of the bucket from now on (in-process indexes
        such as the authorizers', which must agree with the store at the next request); returns the
        bucket's current objects to start from."""
        bucket = self._bucket(bucket_name)
        bucket.subscribers.append(callback)
        return self.list(bucket_name, "/")

    def _remove(self, watcher: Watcher) -> None:
        bucket = self._buckets.get(watcher.bucket)
        if bucket:
            bucket.discard(watcher)

    def object_counts(self) -> dict[str, int]:
        return {name: len(bucket.objects) for name, bucket in self._buckets.items()}

    def watcher_count(self) -> int:
        return sum(len(b.watchers) for b in self._buckets.values())
