"""The watch cache's trigger index: a watcher whose field selector requires one value (a kubelet's
spec.nodeName=X) is offered only the events of objects that have or had that value, and gets exactly
the events it would get if every event were offered to it (bindings arrive ADDED, a pod leaving its node
DELETED with the state that matched, label selectors still apply); a selector the index cannot serve
(`!=`, none) is offered everything, as before. Both backends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.apiserver import fieldselect, kinds
from controlplane.apiserver.fieldselect import Selection, slim_view
from controlplane.storage.cache import CLOSED, Trigger, WatchCache

from .conftest import Backend

POD = next(k for k in kinds.BUILT_IN if k.kind == "Pod" and k.api_version == "v1")


def pod(name: str, node: str = "", phase: str = "Pending", **labels: str) -> bytes:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": spec,
            "status": {"phase": phase},
        }
    ).encode()


@pytest.fixture
async def cache(backend: Backend):
    store = backend.open("db")
    await store.start()
    c = WatchCache(store, viewer=slim_view)
    await c.start()
    yield c
    await c.stop()
    await store.close()


def selection(label_selector: str, field_selector: str) -> Selection:
    predicate, _ = fieldselect.predicate(POD, label_selector, field_selector)
    assert isinstance(predicate, Selection)
    return predicate


def received(watcher: Any) -> list[tuple[str, str, str, str]]:
    """Everything queued: (type, name, resourceVersion, nodeName of the object sent)."""
    out = []
    while not watcher.queue.empty():
        event = watcher.queue.get_nowait()
        assert event is not CLOSED
        obj = event.obj.obj
        out.append(
            (
                event.type,
                obj["metadata"]["name"],
                obj["metadata"]["resourceVersion"],
                obj["spec"].get("nodeName", ""),
            )
        )
    return out


async def life(cache: WatchCache) -> list[int]:
    """Pods created, bound, relabelled, moved and deleted; returns the revisions."""
    store = cache.store
    r1 = await store.create("/pods/ns/p1", pod("p1", app="web"))
    r2 = await store.update("/pods/ns/p1", pod("p1", "n1", app="web"), r1)  # bound to n1
    r3 = await store.update("/pods/ns/p1", pod("p1", "n1", "Running", app="web"), r2)
    r4 = await store.update("/pods/ns/p1", pod("p1", "n1", "Running", app="db"), r3)  # relabelled
    r5 = await store.update("/pods/ns/p1", pod("p1", "n2", "Running", app="db"), r4)  # moved to n2
    r6 = await store.create("/pods/ns/p2", pod("p2", "n1", app="web"))  # created bound
    r7 = await store.delete("/pods/ns/p2", r6)
    r8 = await store.delete("/pods/ns/p1", r5)
    await cache.wait_for(r8)
    return [r1, r2, r3, r4, r5, r6, r7, r8]


@pytest.mark.parametrize(
    ("labels", "fields", "indexed"),
    [
        ("", "spec.nodeName=n1", True),
        ("", "spec.nodeName=n2", True),
        ("", "spec.host=n1", True),  # the old name of the same field
        ("app=web", "spec.nodeName=n1", True),
        ("", "spec.nodeName=n1,status.phase=Running", True),
        ("", "status.phase=Running,spec.nodeName=n1", True),  # indexed by the phase
        ("", "spec.nodeName!=n1", False),
        ("app=web", "", False),
    ],
)
async def test_an_indexed_watcher_gets_what_an_unindexed_one_gets(
    cache: WatchCache, labels: str, fields: str, indexed: bool
) -> None:
    predicate = selection(labels, fields)
    assert (predicate.trigger is not None) == indexed
    routed = cache.watch("pods", "/pods/", predicate, cache.revision, predicate.trigger)
    offered_all = cache.watch("pods", "/pods/", predicate, cache.revision)
    await life(cache)
    got = received(routed)
    assert got == received(offered_all)
    assert got, "every selector here matches part of the life"


async def test_bindings_moves_and_deletions_reach_the_nodes_watchers(cache: WatchCache) -> None:
    n1, n2 = selection("", "spec.nodeName=n1"), selection("app=web", "spec.nodeName=n1")
    n2_only = selection("", "spec.nodeName=n2")
    w1 = cache.watch("pods", "/pods/", n1, cache.revision, n1.trigger)
    web = cache.watch("pods", "/pods/", n2, cache.revision, n2.trigger)
    w2 = cache.watch("pods", "/pods/", n2_only, cache.revision, n2_only.trigger)
    r = [str(v) for v in await life(cache)]
    # The binding is n1's ADDED; the move to n2 is n1's DELETED, carrying the state that matched (n1).
    assert received(w1) == [
        ("ADDED", "p1", r[1], "n1"),
        ("MODIFIED", "p1", r[2], "n1"),
        ("MODIFIED", "p1", r[3], "n1"),
        ("DELETED", "p1", r[4], "n1"),
        ("ADDED", "p2", r[5], "n1"),
        ("DELETED", "p2", r[6], "n1"),
    ]
    # With app=web: the relabelling leaves the selection first.
    assert received(web) == [
        ("ADDED", "p1", r[1], "n1"),
        ("MODIFIED", "p1", r[2], "n1"),
        ("DELETED", "p1", r[3], "n1"),
        ("ADDED", "p2", r[5], "n1"),
        ("DELETED", "p2", r[6], "n1"),
    ]
    assert received(w2) == [("ADDED", "p1", r[4], "n2"), ("DELETED", "p1", r[7], "n2")]


class Counted:
    """A selection that counts how often the cache asks it."""

    def __init__(self, inner: Selection) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, view: dict[str, Any]) -> bool:
        self.calls += 1
        return self.inner(view)


async def test_an_event_is_weighed_by_its_nodes_watcher_alone(cache: WatchCache) -> None:
    watchers = []
    for i in range(50):
        inner = selection("", f"spec.nodeName=n{i}")
        counted = Counted(inner)
        watchers.append((counted, cache.watch("pods", "/pods/", counted, cache.revision, inner.trigger)))
    fallback = Counted(selection("", "spec.nodeName!=n3"))
    cache.watch("pods", "/pods/", fallback, cache.revision)
    rev = await cache.store.create("/pods/ns/p", pod("p", "n7"))
    await cache.wait_for(rev)
    assert [i for i, (counted, _) in enumerate(watchers) if counted.calls] == [7]
    assert fallback.calls == 1  # a selector without a trigger is still asked
    assert [e[0] for e in received(watchers[7][1])] == ["ADDED"]


async def test_a_closed_watcher_leaves_the_index(cache: WatchCache) -> None:
    inner = selection("", "spec.nodeName=n1")
    watcher = cache.watch("pods", "/pods/", inner, cache.revision, inner.trigger)
    other = cache.watch("pods", "/pods/", inner, cache.revision, inner.trigger)
    watcher.close()
    assert cache.watcher_count() == 1
    other.close()
    assert cache.watcher_count() == 0
    assert not cache._buckets["pods"].indexes  # nothing kept for a value no watcher needs


def test_a_trigger_reads_the_field_as_the_selector_does() -> None:
    host = selection("", "spec.host=n1").trigger
    node = selection("", "spec.nodeName=n1").trigger
    assert isinstance(host, Trigger) and isinstance(node, Trigger)
    assert host.field == node.field  # one index for one path
    unbound = slim_view(json.loads(pod("p")))
    assert node.value_of(unbound) == "" and node.value_of(slim_view(json.loads(pod("p", "n1")))) == "n1"
    assert selection("", "spec.hostNetwork=false").trigger.value_of(unbound) == "false"  # type: ignore[union-attr]
