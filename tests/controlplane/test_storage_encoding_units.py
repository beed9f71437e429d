"""controlplane/storage/encoding.py and the watch cache's use of it: the versioned bytes spliced from one
encoding are exactly what decoding the stored value, setting the revision and encoding again gives, and
a write handed over lands in the cache the same either way (a real SQLite store, and a real etcd whose
watch brings the write back later); the watch feed's batches applied in slices of whole revisions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.apiserver.fieldselect import slim_view
from controlplane.storage import ConflictError
from controlplane.storage import cache as cache_module
from controlplane.storage.cache import CachedObject, WatchCache
from controlplane.storage.encoding import encode, unversioned
from controlplane.storage.interface import Event
from controlplane.storage.sqlite import SQLiteStore

from .conftest import Backend

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
metadata = st.dictionaries(st.text(max_size=6), values, max_size=4)
# Any key text too: the splice writes the top-level keys itself (escaping as the encoder does).
objects = st.dictionaries(
    st.sampled_from(["apiVersion", "kind", "spec", "status", "x"]) | st.text(max_size=4), values, max_size=4
)


def reference(value: bytes, revision: int) -> bytes:
    """What the watch cache did before (and still does for any value it was not handed)."""
    return CachedObject.from_value("/pods/ns/p", value, revision, lambda o: o).raw


@settings(max_examples=150, deadline=None)
@given(obj=objects, meta=metadata, position=st.integers(0, 5), revision=st.integers(1, 10**12))
def test_the_spliced_versioned_bytes_equal_decode_set_encode(
    obj: dict[str, Any], meta: dict[str, Any], position: int, revision: int
) -> None:
    items = list(obj.items())
    items.insert(min(position, len(items)), ("metadata", meta))
    whole = dict(items)
    written = unversioned(whole)
    assert json.loads(written.value) == {
        **whole,
        "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"},
    }
    assert written.versioned(revision) == reference(written.value, revision)


@settings(max_examples=150, deadline=None)
@given(value=values | objects)
def test_encode_writes_what_json_dumps_writes(value: Any) -> None:
    """One encoder kept for every call writes what json.dumps with the same arguments builds each time."""
    assert encode(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def test_an_object_without_metadata_has_no_splice_and_a_stale_resource_version_is_left_out() -> None:
    assert unversioned({"kind": "X"}).versioned(3) is None
    obj = {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "7", "uid": "u"}, "spec": {}}
    written = unversioned(obj)
    assert written.value == encode({"kind": "Pod", "metadata": {"name": "p", "uid": "u"}, "spec": {}})
    assert obj["metadata"]["resourceVersion"] == "7"  # the caller's object is not changed
    assert written.versioned(9) == reference(written.value, 9)


def pod(name: str, node: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "é"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
        if node
        else {"containers": []},
        "status": {"phase": "Pending"},
    }


async def test_a_handed_over_write_lands_in_the_cache_as_if_read_back_from_its_bytes_on_both_stores(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite tells the cache of a commit while the write runs; etcd brings it back through the watch
    after the write returned, by which time the writer may have changed its object. Either way the copy
    of a handed-over write is spliced, never decoded from the bytes, and equals what decoding them gives;
    a write that lost its compare-and-swap leaves nothing behind, and a write not handed over is read
    from its bytes."""
    decoded: list[bytes] = []
    original = CachedObject.decoded_from_value.__func__  # type: ignore[attr-defined]

    def spy(cls: type[CachedObject], key: str, value: bytes, revision: int, viewer: Any) -> Any:
        if key.startswith("/pods/"):
            decoded.append(value)
        return original(cls, key, value, revision, viewer)

    monkeypatch.setattr(CachedObject, "decoded_from_value", classmethod(spy))
    store = backend.open("handed")
    await store.start()
    cache = WatchCache(store, viewer=slim_view)
    await cache.start()
    try:
        watcher = cache.watch("pods", "/pods/ns/", None, cache.revision)
        obj = pod("a")
        written = unversioned(obj)
        with cache.expecting(written):
            rev = await store.create("/pods/ns/a", written.value)
        # the answer's bytes, at once (on etcd usually before the event is back)
        answer = cache.written_raw("/pods/ns/a", obj, rev)
        obj["metadata"]["labels"]["app"] = "changed"  # before etcd's event arrives
        bound_written = unversioned(pod("a", node="n1"))
        with cache.expecting(bound_written):
            rev2 = await store.update("/pods/ns/a", bound_written.value, rev)
        lost = unversioned(pod("a", node="n9"))
        with pytest.raises(ConflictError), cache.expecting(lost):
            await store.update("/pods/ns/a", lost.value, rev)
        plain = encode(pod("a", node="n2"))
        rev3 = await store.update("/pods/ns/a", plain, rev2)
        events = [await asyncio.wait_for(watcher.queue.get(), 5) for _ in range(3)]
        assert decoded == [plain]  # the handed-over writes were never decoded
        assert [e.revision for e in events[:2]] == [rev, rev2]  # type: ignore[union-attr]
        for event, value in zip(events, (written.value, bound_written.value, plain), strict=True):
            assert event is not None
            read_back = CachedObject.from_value(event.obj.key, value, event.obj.revision, slim_view)
            assert (event.obj.raw, event.obj.view) == (read_back.raw, read_back.view)
        assert events[0].obj.view["metadata"]["labels"] == {"app": "é"}  # type: ignore[union-attr]
        assert [(e.obj.view.get("spec") or {}).get("nodeName") for e in events] == [None, "n1", "n2"]  # type: ignore[union-attr]
        assert answer == events[0].obj.raw  # type: ignore[union-attr]
        assert cache.written_raw("/pods/ns/a", obj, rev2) is None  # not the object written at rev2
        assert cache.written_raw("/pods/ns/a", {}, rev3) == events[2].obj.raw  # type: ignore[union-attr]
        assert cache._handed == {} == cache._handed_objs and cache._expected is None
    finally:
        await cache.stop()
        await store.close()


async def test_a_store_batch_is_applied_in_slices_that_never_split_a_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd hands the feed hundreds of events in one response under load: applying them lets the event
    loop serve others between slices, and what a reader sees then is always a whole revision."""
    monkeypatch.setattr(cache_module, "APPLY_SLICE", -1.0)  # every revision boundary is a slice's end
    cache = WatchCache(SQLiteStore(tmp_path / "unused.db"))
    batch = [
        Event("PUT", f"/pods/ns/{name}", encode(pod(name)), revision, revision, None)
        for name, revision in (("a", 5), ("b", 5), ("c", 6), ("d", 7), ("e", 7))
    ]
    seen: list[tuple[int, list[str]]] = []

    async def reader() -> None:
        while True:
            seen.append((cache.revision, [c.key[-1] for c in cache.list("pods", "/pods/")]))
            await asyncio.sleep(0)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    await cache._apply_batch(batch)
    task.cancel()
    wholes = {0: [], 5: ["a", "b"], 6: ["a", "b", "c"], 7: ["a", "b", "c", "d", "e"]}
    assert {rev for rev, _ in seen} >= {0, 5, 6}  # the reader ran between the slices
    assert all(keys == wholes[rev] for rev, keys in seen)
