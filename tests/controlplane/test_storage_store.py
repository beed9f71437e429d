"""The store interface on both backends (a real SQLite file, a real etcd): revisions, preconditions,
lists at a revision with pages, compaction and watch. What only one backend has is tested with it
(test_storage_etcd.py for etcd)."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.storage import (
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    NotFoundError,
    Store,
    StoreTooLargeError,
)
from controlplane.storage.etcd import EtcdStore
from controlplane.storage.interface import MAX_REQUEST_BYTES, TOO_LARGE

from .conftest import Backend


@pytest.fixture
async def store(backend: Backend):
    s = backend.open()
    await s.start()
    yield s
    await s.close()


async def events(stream, n: int) -> list[Event]:
    """The next `n` changes of a watch, however the backend batches them (etcd's progress
    notifications left out)."""
    out: list[Event] = []
    while len(out) < n:
        out += [e for e in await asyncio.wait_for(anext(stream), 5) if e.type != "PROGRESS"]
    return out


async def test_revisions_increase_and_preconditions_hold(store: Store) -> None:
    r1 = await store.create("/pods/a/x", b"1")
    r2 = await store.create("/pods/a/y", b"2")
    assert r2 == r1 + 1 == store.revision
    with pytest.raises(KeyExistsError):
        await store.create("/pods/a/x", b"again")
    r3 = await store.update("/pods/a/x", b"1b", r1)
    with pytest.raises(ConflictError):
        await store.update("/pods/a/x", b"stale", r1)
    kv = await store.get("/pods/a/x")
    assert kv is not None and kv.value == b"1b" and kv.mod_revision == r3 and kv.create_revision == r1
    with pytest.raises(ConflictError):
        await store.delete("/pods/a/x", r1)
    await store.delete("/pods/a/x", r3)
    assert await store.get("/pods/a/x") is None
    with pytest.raises(NotFoundError):
        await store.update("/pods/a/x", b"gone", 0)
    with pytest.raises(NotFoundError):
        await store.delete("/pods/a/x", 0)
    # A deleted key can be created again, with a new create revision.
    r5 = await store.create("/pods/a/x", b"new")
    assert (await store.get("/pods/a/x")).create_revision == r5  # type: ignore[union-attr]


async def test_list_at_revision_and_pagination(store: Store) -> None:
    revs = [await store.create(f"/cm/ns/k{i}", str(i).encode()) for i in range(5)]
    snapshot = store.revision
    await store.update("/cm/ns/k0", b"changed", revs[0])
    await store.delete("/cm/ns/k1", revs[1])
    await store.create("/cm/other/z", b"z")
    items, rev, more = await store.list("/cm/ns/", snapshot)
    assert rev == snapshot and not more
    assert [(kv.key, kv.value) for kv in items] == [(f"/cm/ns/k{i}", str(i).encode()) for i in range(5)]
    now, _, _ = await store.list("/cm/ns/")
    assert [kv.key for kv in now] == ["/cm/ns/k0", "/cm/ns/k2", "/cm/ns/k3", "/cm/ns/k4"]
    assert now[0].value == b"changed"
    page, _, more = await store.list("/cm/ns/", snapshot, limit=2)
    assert [kv.key for kv in page] == ["/cm/ns/k0", "/cm/ns/k1"] and more
    page, _, more = await store.list("/cm/ns/", snapshot, start_after=page[-1].key, limit=2)
    assert [kv.key for kv in page] == ["/cm/ns/k2", "/cm/ns/k3"] and more
    page, _, more = await store.list("/cm/ns/", snapshot, start_after=page[-1].key, limit=2)
    assert [kv.key for kv in page] == ["/cm/ns/k4"] and not more


async def test_a_list_at_a_future_revision_is_refused_not_served_empty(store: Store) -> None:
    await store.create("/cm/ns/a", b"1")
    future = 10**12  # beyond anything the session's shared etcd reaches
    with pytest.raises(FutureRevisionError) as caught:
        await store.list("/cm/ns/", future)
    assert caught.value.requested == future and caught.value.current >= store.revision - 1
    with pytest.raises(FutureRevisionError):
        await store.list("/cm/ns/", future, limit=1)


async def test_compaction_keeps_latest_and_refuses_old_revisions(store: Store, backend: Backend) -> None:
    r1 = await store.create("/a/x", b"1")
    r2 = await store.update("/a/x", b"2", r1)
    r3 = await store.create("/a/y", b"y")
    await store.delete("/a/y", r3)
    target = store.revision
    await store.compact(target)
    # (etcd's compactor records its round in compact_rev_key, a write of its own.)
    assert store.compacted_revision == target
    items, _, _ = await store.list("/a/")
    assert [(kv.key, kv.value) for kv in items] == [("/a/x", b"2")]
    with pytest.raises(CompactedError):
        await store.list("/a/", r2)
    with pytest.raises(CompactedError):
        await anext(store.watch(r1))
    # Revisions keep counting up across a restart even though the newest rows were compacted away.
    top = store.revision
    await store.close()
    reopened = backend.open()
    await reopened.start()
    try:
        assert reopened.revision == top
        assert reopened.compacted_revision == target
        created = await reopened.create("/a/z", b"z")
        # The next revision; on etcd the compactor's compact_rev_key write took one in between.
        assert created == top + (1 if backend.name == "sqlite" else 2)
    finally:
        await reopened.close()


async def test_watch_replays_history_then_streams(store: Store) -> None:
    r1 = await store.create("/a/1", b"1")
    r2 = await store.create("/a/2", b"2")
    stream = store.watch(r1)
    first = await events(stream, 1)
    assert [(e.type, e.key, e.revision) for e in first] == [("PUT", "/a/2", r2)]
    r3 = await store.update("/a/1", b"1b", r1)
    nxt = await events(stream, 1)
    assert [(e.type, e.value, e.revision, e.create_revision) for e in nxt] == [("PUT", b"1b", r3, r1)]
    r4 = await store.delete("/a/2", r2)
    nxt = await events(stream, 1)
    assert [(e.type, e.key, e.value, e.revision) for e in nxt] == [("DELETE", "/a/2", b"2", r4)]
    await stream.aclose()
    # A watch replaying history carries the previous values.
    replay = store.watch(r2)
    assert [(e.type, e.key, e.prev_value) for e in await events(replay, 2)] == [
        ("PUT", "/a/1", b"1"),
        ("DELETE", "/a/2", b"2"),
    ]
    await replay.aclose()


async def test_a_write_over_etcds_request_limit_is_refused_whole_on_both_stores(store: Store) -> None:
    """etcd refuses a write over its --max-request-bytes (1.5 MiB by default) with `etcdserver: request is
    too large`; the SQLite store holds the same limit, measured the same way (the key counted as etcd's
    transaction counts it), so the largest object each takes is the same."""
    key = "/configmaps/ns/big"
    # The etcd stores of these tests live under a prefix of their own rather than /registry.
    prefix = store.config.prefix.rstrip("/") if isinstance(store, EtcdStore) else "/registry"
    fits = MAX_REQUEST_BYTES - 3 * len(prefix + key) - 76
    first = await store.create(key, b"x" * fits)
    with pytest.raises(StoreTooLargeError) as err:
        await store.create("/configmaps/ns/bigger", b"x" * (fits + 1))
    assert err.value.backend_message == TOO_LARGE
    with pytest.raises(StoreTooLargeError):  # measured before the key's existence is looked at
        await store.create(key, b"y" * (fits + 10))
    with pytest.raises(StoreTooLargeError):
        await store.update(key, b"y" * (fits + 10), first)
    assert store.revision == first
    kv = await store.get(key)
    assert kv is not None and kv.mod_revision == first and kv.value == b"x" * fits
    assert await store.get("/configmaps/ns/bigger") is None
