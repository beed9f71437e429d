"""The SQLite store: revisions, preconditions, history, compaction and watch, on a real database file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controlplane.storage import CompactedError, ConflictError, KeyExistsError, NotFoundError
from controlplane.storage.sqlite import SQLiteStore


@pytest.fixture
async def store(tmp_path: Path):
    s = SQLiteStore(tmp_path / "state.db")
    await s.start()
    yield s
    await s.close()


async def test_revisions_increase_and_preconditions_hold(store: SQLiteStore) -> None:
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
    # A deleted key can be created again, with a new create revision.
    r5 = await store.create("/pods/a/x", b"new")
    assert (await store.get("/pods/a/x")).create_revision == r5  # type: ignore[union-attr]


async def test_list_at_revision_and_pagination(store: SQLiteStore) -> None:
    for i in range(5):
        await store.create(f"/cm/ns/k{i}", str(i).encode())
    snapshot = store.revision
    await store.update("/cm/ns/k0", b"changed", 1)
    await store.delete("/cm/ns/k1", 2)
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


async def test_compaction_keeps_latest_and_refuses_old_revisions(store: SQLiteStore, tmp_path: Path) -> None:
    await store.create("/a/x", b"1")
    await store.update("/a/x", b"2", 1)
    await store.create("/a/y", b"y")
    await store.delete("/a/y", 3)
    await store.compact(store.revision)
    items, _, _ = await store.list("/a/")
    assert [(kv.key, kv.value) for kv in items] == [("/a/x", b"2")]
    with pytest.raises(CompactedError):
        await store.list("/a/", 2)
    # Revisions keep counting up across a restart even though the newest rows were compacted away.
    top = store.revision
    await store.close()
    reopened = SQLiteStore(tmp_path / "state.db")
    await reopened.start()
    assert reopened.revision == top
    assert await reopened.create("/a/z", b"z") == top + 1
    await reopened.close()


async def test_watch_replays_history_then_streams(store: SQLiteStore) -> None:
    await store.create("/a/1", b"1")
    await store.create("/a/2", b"2")
    stream = store.watch(1)
    first = await asyncio.wait_for(anext(stream), 2)
    assert [(e.type, e.key, e.revision) for e in first] == [("PUT", "/a/2", 2)]
    await store.update("/a/1", b"1b", 1)
    nxt = await asyncio.wait_for(anext(stream), 2)
    assert [(e.type, e.value) for e in nxt] == [("PUT", b"1b")]
    await store.delete("/a/2", 2)
    nxt = await asyncio.wait_for(anext(stream), 2)
    assert [(e.type, e.key, e.value) for e in nxt] == [("DELETE", "/a/2", b"2")]
    await stream.aclose()
    # A watch replaying history carries the previous values.
    replay = await asyncio.wait_for(anext(store.watch(2)), 2)
    assert [(e.type, e.key, e.prev_value) for e in replay] == [("PUT", "/a/1", b"1"), ("DELETE", "/a/2", b"2")]
