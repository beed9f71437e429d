"""The watch cache: consistent state, filtered fan-out, the retained window and 410 beyond it, on both
backends (SQLite tells the cache of each commit; etcd feeds it through a watch)."""

from __future__ import annotations

import asyncio
import json

import pytest

from controlplane.storage.cache import CLOSED, GoneError, WatchCache
from controlplane.storage.interface import Event, StoreError

from .conftest import Backend


def obj(name: str, **labels: str) -> bytes:
    return json.dumps({"kind": "ConfigMap", "metadata": {"name": name, "labels": labels}}).encode()


@pytest.fixture
async def cache(backend: Backend):
    store = backend.open("db")
    await store.start()
    pre = await store.create("/configmaps/ns/pre", obj("pre"))
    c = WatchCache(store, window=5)
    c.pre_revision = pre  # type: ignore[attr-defined]
    await c.start()
    yield c
    await c.stop()
    await store.close()


async def drain(watcher, n: int) -> list[tuple[str, str, str]]:
    out = []
    for _ in range(n):
        ev = await asyncio.wait_for(watcher.queue.get(), 2)
        assert ev is not CLOSED
        out.append((ev.type, ev.obj.obj["metadata"]["name"], ev.obj.obj["metadata"]["resourceVersion"]))
    return out


async def test_state_carries_resource_versions(cache: WatchCache) -> None:
    rev = await cache.store.create("/configmaps/ns/a", obj("a"))
    await cache.wait_for(rev)
    cached = cache.get("/configmaps/ns/a")
    assert cached is not None and cached.obj["metadata"]["resourceVersion"] == str(rev)
    assert json.loads(cached.raw)["metadata"]["resourceVersion"] == str(rev)
    assert [c.key for c in cache.list("configmaps", "/configmaps/ns/")] == [
        "/configmaps/ns/a",
        "/configmaps/ns/pre",
    ]


async def test_initial_events_and_selector_transitions(cache: WatchCache) -> None:
    store = cache.store
    watcher = cache.watch(
        "configmaps", "/configmaps/", lambda o: o["metadata"]["labels"].get("app") == "x", None
    )
    all_events = cache.watch("configmaps", "/configmaps/", None, None)
    assert await drain(all_events, 1) == [("ADDED", "pre", str(cache.pre_revision))]  # type: ignore[attr-defined]
    r = await store.create("/configmaps/ns/b", obj("b", app="x"))
    r2 = await store.update("/configmaps/ns/b", obj("b", app="y"), r)
    r3 = await store.update("/configmaps/ns/b", obj("b", app="x"), r2)
    await store.delete("/configmaps/ns/b", r3)
    # Leaving the selection looks like a deletion, entering it like an addition.
    assert [e[0] for e in await drain(watcher, 4)] == ["ADDED", "DELETED", "ADDED", "DELETED"]
    assert [e[0] for e in await drain(all_events, 4)] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


async def test_leaving_the_selection_sends_the_previous_state(cache: WatchCache) -> None:
    # Upstream's cacheWatcher: DELETED carries the state that matched, at the event's resourceVersion.
    store = cache.store
    watcher = cache.watch(
        "configmaps", "/configmaps/", lambda o: o["metadata"]["labels"].get("app") == "x", None
    )
    r = await store.create("/configmaps/ns/c", obj("c", app="x"))
    r2 = await store.update("/configmaps/ns/c", obj("c", app="y"), r)
    events = []
    for _ in range(2):
        ev = await asyncio.wait_for(watcher.queue.get(), 2)
        assert ev is not CLOSED
        events.append((ev.type, ev.obj.obj["metadata"]))
    assert [(t, m["labels"], m["resourceVersion"]) for t, m in events] == [
        ("ADDED", {"app": "x"}, str(r)),
        ("DELETED", {"app": "x"}, str(r2)),
    ]


async def test_resume_inside_window_and_gone_outside(cache: WatchCache) -> None:
    store = cache.store
    revs = [await store.create(f"/configmaps/ns/k{i}", obj(f"k{i}")) for i in range(8)]
    await cache.wait_for(revs[-1])
    watcher = cache.watch("configmaps", "/configmaps/", None, revs[-3])
    assert [e[1] for e in await drain(watcher, 2)] == ["k6", "k7"]
    with pytest.raises(GoneError):
        cache.watch("configmaps", "/configmaps/", None, revs[0])


async def test_slow_watcher_is_closed_not_blocking(backend: Backend) -> None:
    store = backend.open("db2")
    await store.start()
    c = WatchCache(store, window=100, watcher_queue=3)
    await c.start()
    slow = c.watch("configmaps", "/configmaps/", None, c.revision)
    for i in range(6):
        rev = await store.create(f"/configmaps/ns/s{i}", obj(f"s{i}"))
    await c.wait_for(rev)
    assert slow.closed and c.watcher_count() == 0
    await c.stop()
    await store.close()
    # The stream still ends (the client then resumes from its last resourceVersion).
    items = []
    while not slow.queue.empty():
        items.append(slow.queue.get_nowait())
    assert items[-1] is CLOSED


async def test_a_restart_starts_a_new_window(backend: Backend) -> None:
    """As upstream's watch cache starts from its initial list: the state is all there, and a watcher of
    the previous process gets 410 ("too old resource version: RV (START)") and relists."""
    store = backend.open("db3")
    await store.start()
    revs = [await store.create(f"/configmaps/ns/r{i}", obj(f"r{i}")) for i in range(4)]
    r4 = await store.update("/configmaps/ns/r0", obj("r0", app="x"), revs[0])
    await store.close()
    reopened = backend.open("db3")
    await reopened.start()
    c = WatchCache(reopened, window=100)
    await c.start()
    assert [k.key for k in c.list("configmaps", "/configmaps/")] == [f"/configmaps/ns/r{i}" for i in range(4)]
    with pytest.raises(GoneError) as gone:
        c.watch("configmaps", "/configmaps/", None, revs[1])
    assert str(gone.value) == f"too old resource version: {revs[1]} ({c.revision})"
    assert c.revision >= r4
    watcher = c.watch("configmaps", "/configmaps/", None, c.revision)  # from the new window on: fine
    rev = await reopened.update("/configmaps/ns/r1", obj("r1", app="y"), revs[1])
    assert await drain(watcher, 1) == [("MODIFIED", "r1", str(rev))]
    await c.stop()
    await reopened.close()


class _WatchOnly:
    """The store as the cache sees it through its watch alone (no in-process subscription), so that
    stopping the cache's feed leaves the cache behind the store, as a lagging etcd watch does."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name: str):
        if name == "subscribe":
            raise AttributeError(name)
        return getattr(self._store, name)


class _BreakingWatch(_WatchOnly):
    """The store seen through its watch, whose first watch stream breaks after its first batch, as an
    etcd stream does on "Stream removed"."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.opened: list[int] = []

    async def watch(self, from_revision: int):
        self.opened.append(from_revision)
        broken = len(self.opened) == 1
        async for batch in self._store.watch(from_revision):
            yield batch
            if broken:
                raise StoreError("etcd watch: UNKNOWN: Stream removed")


async def test_a_broken_watch_is_opened_again_from_the_last_applied_revision(backend: Backend) -> None:
    """A watch that breaks for any reason is opened again (as upstream's reflector does), from the
    revision the cache had applied: nothing is missed and nothing is applied twice, and reads that wait
    for freshness are served, not left to time out."""
    store = backend.open("db4")
    await store.start()
    wrapped = _BreakingWatch(store)
    c = WatchCache(wrapped, window=100)  # type: ignore[arg-type]
    await c.start()
    first = await store.create("/configmaps/ns/b0", obj("b0"))
    await c.wait_for(first)
    later = [await store.create(f"/configmaps/ns/b{i}", obj(f"b{i}")) for i in range(1, 4)]
    await c.wait_for(later[-1], patience=10.0)
    await c.wait_fresh()
    assert len(wrapped.opened) >= 2 and wrapped.opened[1] >= first
    assert [k.key for k in c.list("configmaps", "/configmaps/")] == [f"/configmaps/ns/b{i}" for i in range(4)]
    await c.stop()
    await store.close()


async def test_a_write_reads_the_store_when_the_watch_lags_too_far(backend: Backend) -> None:
    """A read-modify-write starts from the cache's copy once the cache holds the key's last write; when the
    watch lags further than the patience, it reads the store instead of failing (upstream's
    GuaranteedUpdate reads etcd when its cached copy is stale), so a slow cache never turns a write into
    a 500."""
    store = backend.open("db5")
    await store.start()
    c = WatchCache(_WatchOnly(store), window=100)  # type: ignore[arg-type]
    await c.start()
    first = await store.create("/configmaps/ns/lag", obj("lag"))
    await c.wait_for(first)
    fresh = await c.get_for_update("/configmaps/ns/lag")
    assert fresh is not None and fresh.revision == first
    await c.stop()  # the watch stops: the cache stays at `first`
    moved = await store.update("/configmaps/ns/lag", obj("lag", by="other"), first)
    try:
        read = await c.get_for_update("/configmaps/ns/lag", patience=0.2)
        assert read is not None and read.revision == moved
        assert read.obj["metadata"]["labels"] == {"by": "other"}
        assert read.obj["metadata"]["resourceVersion"] == str(moved)
        assert c.get("/configmaps/ns/lag").revision == first  # the cache itself is left as it was
        await store.delete("/configmaps/ns/lag", moved)
        assert await c.get_for_update("/configmaps/ns/lag", patience=0.2) is None
    finally:
        await store.close()


class _CountingStore:
    """What wait_consistent asks of etcd: its current revision, and the scan of the prefix (answered as
    etcd would: unchanged only from the last revision written under the prefix on)."""

    def __init__(self, target: int) -> None:
        self.target, self.last_in_prefix = target, 0
        self.asked: list[int] = []

    async def current_revision(self) -> int:
        return self.target

    async def live_count_if_unchanged(self, since: int, at: int) -> int | None:
        self.asked.append(since)
        return 1 if since >= self.last_in_prefix else None


async def test_a_consistent_read_waits_for_a_moving_feed_without_having_etcd_scan_the_prefix() -> None:
    """A loaded server's watch lags behind etcd's revision: while it keeps bringing events the read
    waits for it (no scan of every key, whose answer would be "changed"); once the feed stops short of
    the target (the rest spent outside the prefix: the compactor's key), one scan says so. The feed
    brings one revision in each of the read's waits, so it moves through many of them whatever the
    machine's load (asking during the first would have the read scan at revision 1)."""
    store = _CountingStore(target=20)
    cache = WatchCache(store)  # type: ignore[arg-type]
    waiting = asyncio.Event()
    wait_for = cache.wait_for

    async def each_wait_told(revision: int, patience: float = 3.0) -> None:
        waiting.set()
        await wait_for(revision, patience)

    cache.wait_for = each_wait_told  # type: ignore[method-assign]

    def write(revision: int) -> None:
        store.last_in_prefix = revision
        cache._apply(Event("PUT", "/configmaps/ns/a", obj("a"), revision, 1, None))

    async def feed() -> None:
        for revision in range(1, 20):
            await waiting.wait()
            waiting.clear()
            write(revision)

    task = asyncio.create_task(feed())
    try:
        await cache.wait_consistent(patience=0.02)
        assert store.asked == [19]  # asked once, when the feed had stopped
        assert task.done() and cache.revision == 20
    finally:
        task.cancel()
    store.target = 40
    write(30)
    await cache.wait_consistent(patience=0.02)
    assert cache.revision == 40 and store.asked == [19, 30]


async def test_a_read_through_answers_the_stores_version_without_waiting_for_the_feed(
    backend: Backend,
) -> None:
    """A GET without a resourceVersion reads the store, as upstream's Cacher.Get does: a cache whose
    feed has not brought a write (here: never started) still answers it, and its later versions and its
    deletion; once the cache holds that very version, its own copy is answered (nothing decoded)."""
    store = backend.open("db")
    await store.start()
    key = "/configmaps/ns/a"
    try:
        cache = WatchCache(store)
        rev = await store.create(key, obj("a"))
        assert cache.get(key) is None
        read = await cache.read_through(key)
        assert read is not None and read.revision == rev
        assert read.obj["metadata"]["resourceVersion"] == str(rev)
        cache._apply(Event("PUT", key, obj("a"), rev, rev, None))
        held = cache.get(key)
        assert held is not None and await cache.read_through(key) is held
        newer_rev = await store.update(key, obj("a", app="x"), rev)
        newer = await cache.read_through(key)
        assert newer is not None and newer.revision == newer_rev
        assert newer.obj["metadata"]["labels"] == {"app": "x"} and cache.get(key) is held
        await store.delete(key, newer_rev)
        assert await cache.read_through(key) is None
    finally:
        await store.close()
