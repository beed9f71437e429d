"""controlplane/storage/encoding.py and the watch cache's use of it: the versioned bytes spliced from one
encoding are exactly what decoding the stored value, setting the revision and encoding again gives, and
a write through an in-process store lands in the cache the same either way (a real SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.apiserver.fieldselect import slim_view
from controlplane.storage.cache import CachedObject, WatchCache
from controlplane.storage.encoding import encode, unversioned
from controlplane.storage.sqlite import SQLiteStore

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
metadata = st.dictionaries(st.text(max_size=6), values, max_size=4)
objects = st.dictionaries(st.sampled_from(["apiVersion", "kind", "spec", "status", "x"]), values, max_size=4)


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


async def test_a_write_through_sqlite_lands_in_the_cache_as_if_read_back_from_its_bytes(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    await store.start()
    cache = WatchCache(store, viewer=slim_view)
    await cache.start()
    try:
        watcher = cache.watch("pods", "/pods/ns/", None, cache.revision)
        obj = pod("a")
        written = unversioned(obj)
        with cache.expecting(written):
            rev = await store.create("/pods/ns/a", written.value)
        bound = pod("a", node="n1")
        bound_written = unversioned(bound)
        with cache.expecting(bound_written):
            rev2 = await store.update("/pods/ns/a", bound_written.value, rev)
        # Not handed over: read from the bytes as before.
        await store.update("/pods/ns/a", encode(pod("a", node="n2")), rev2)
        events = [watcher.queue.get_nowait() for _ in range(3)]
        for event, value in zip(events, (written.value, bound_written.value), strict=False):
            read_back = CachedObject.from_value(event.obj.key, value, event.obj.revision, slim_view)
            assert (event.obj.raw, event.obj.view) == (read_back.raw, read_back.view)
        assert [(e.obj.view.get("spec") or {}).get("nodeName") for e in events] == [None, "n1", "n2"]
        # The cache's copy shares nothing with the writer's object.
        obj["metadata"]["labels"]["app"] = "changed"
        assert events[0].obj.view["metadata"]["labels"] == {"app": "é"}
        assert cache._expected is None
    finally:
        await cache.stop()
        await store.close()
