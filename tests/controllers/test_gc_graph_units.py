"""The ownership graph's rules, without a server: what each change asks the collector to look at."""

from __future__ import annotations

from controlplane.controllers.garbagecollector.graph import Graph


def obj(
    uid: str,
    kind: str = "Pod",
    owners: list[str] = (),
    block: bool = False,
    deleting: bool = False,  # type: ignore[assignment]
    finalizers: list[str] = (),
) -> dict:  # type: ignore[assignment]
    meta = {
        "uid": uid,
        "name": uid,
        "namespace": "ns",
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": o, "uid": o, "blockOwnerDeletion": block}
            for o in owners
        ],
        "finalizers": list(finalizers),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, "metadata": meta}


def graph() -> Graph:
    return Graph(lambda api_version, kind: True)


def test_an_unseen_owner_is_virtual_and_checked() -> None:
    g = graph()
    assert g.observe(obj("p1", owners=["rs1"])) == [("delete", "rs1")]
    assert g.nodes["rs1"].virtual and g.nodes["rs1"].dependents == {"p1"}
    assert g.observe(obj("rs1", kind="ReplicaSet")) == []  # seen now: real
    assert not g.nodes["rs1"].virtual and g.nodes["rs1"].dependents == {"p1"}


def test_a_deleted_owner_sends_its_dependents_to_be_checked() -> None:
    g = graph()
    g.observe(obj("rs1", kind="ReplicaSet"))
    g.observe(obj("p1", owners=["rs1"]))
    g.observe(obj("p2", owners=["rs1"]))
    assert sorted(g.forget(obj("rs1", kind="ReplicaSet"))) == [("delete", "p1"), ("delete", "p2")]
    g.forget(obj("p1"))
    g.forget(obj("p2"))
    assert "rs1" not in g.nodes  # the virtual stand-in goes with its last dependent


def test_foreground_deletion_checks_dependents_then_the_owner() -> None:
    g = graph()
    g.observe(obj("rs1", kind="ReplicaSet"))
    g.observe(obj("p1", owners=["rs1"], block=True))
    work = g.observe(obj("rs1", kind="ReplicaSet", deleting=True, finalizers=["foregroundDeletion"]))
    assert work == [("delete", "p1"), ("delete", "rs1")]
    assert [d.uid for d in g.nodes["rs1"].blocking_dependents(g)] == ["p1"]
    assert g.forget(obj("p1")) == [("delete", "rs1")]  # one fewer to wait for
    assert g.nodes["rs1"].blocking_dependents(g) == []


def test_orphan_finalizer_asks_for_orphaning() -> None:
    g = graph()
    g.observe(obj("rs1", kind="ReplicaSet"))
    assert ("orphan", "rs1") in g.observe(obj("rs1", kind="ReplicaSet", deleting=True, finalizers=["orphan"]))


def test_dropping_a_reference_unlinks_and_releasing_a_block_rechecks_the_owner() -> None:
    g = graph()
    g.observe(obj("rs1", kind="ReplicaSet", deleting=True, finalizers=["foregroundDeletion"]))
    g.observe(obj("p1", owners=["rs1"], block=True))
    assert g.observe(obj("p1", owners=["rs1"], block=False)) == [("delete", "rs1")]
    assert g.observe(obj("p1")) == [("delete", "rs1")]
    assert g.nodes["rs1"].dependents == set()
