"""managedFields of an update: `ssa.changes` walks the old and the new object together and lists field-set
leaves only where they differ, and track_update rebuilds an entry nothing was taken from without listing
its leaves. Both must give exactly what the definitions give (every leaf of both field sets compared, every
entry rebuilt from its leaves): same paths, same entries, same key order, for any pair of objects,
including those that share unchanged parts (a status update keeps the spec object) and values Python's
`==` confuses (1, 1.0 and True spell different `v:` keys)."""

from __future__ import annotations

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.apiserver import ssa
from controlplane.apiserver.kinds.lease import KIND as LEASES
from controlplane.apiserver.kinds.pod import KIND as PODS
from tests.controlplane.test_apiserver_units import _pod

RESETS = (frozenset(), frozenset(("status",)))
_value = st.none() | st.booleans() | st.integers(0, 2) | st.sampled_from(["True", "False", 1.0])
# Pods whose status has map lists (conditions by type, container statuses by name): names unique or
# not, missing or not strings, items changed in part or whole.
_status_pod = st.fixed_dictionaries(
    {"metadata": st.just({"name": "p"}), "spec": st.just({"containers": [{"name": "c"}]})},
    optional={
        "status": st.fixed_dictionaries(
            {},
            optional={
                "conditions": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "type": st.sampled_from(["Ready", "Initialized", 1, True]),
                            "status": _value,
                            "reason": _value,
                        },
                    ),
                    max_size=3,
                ),
                "containerStatuses": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(["c", "d"])},
                        optional={
                            "ready": _value,
                            "state": st.dictionaries(st.sampled_from(["running"]), _value),
                        },
                    ),
                    max_size=2,
                ),
            },
        )
    },
)


def defined_changes(old: dict, new: dict, schema: ssa.Schema, reset: frozenset[str]) -> tuple[set, set]:
    """changed and gone by their definition: every leaf of both field sets, each looked up from the root."""
    new_paths = ssa.leaves(ssa._object_fields(new, schema, reset))
    old_paths = ssa.leaves(ssa._object_fields(old, schema, reset))
    changed = {p for p in new_paths if p not in old_paths or ssa.value_at(old, p) != ssa.value_at(new, p)}
    return changed, old_paths - new_paths


def defined_update(old: dict, new: dict, manager: str, subresource: str, reset: frozenset[str]) -> list:
    """The managedFields after the update by the definition: others lose what changed or went (each entry
    rebuilt from its leaves), the manager owns what it owned and what changed, in an entry at the end."""
    changed, gone = defined_changes(old, new, PODS.apply_schema, reset)
    managed = old["metadata"].get("managedFields") or []
    if not changed and not gone:
        return managed
    kept, mine = [], set()
    for m in managed:
        paths = ssa.leaves(m["fieldsV1"])
        if (m["manager"], m["operation"], m.get("subresource", "")) == (manager, "Update", subresource):
            mine = paths
        elif paths - changed - gone:
            kept.append({**m, "fieldsV1": ssa.build(paths - changed - gone)})
    return [*kept, {"fieldsV1": ssa.build((mine - gone) | changed)}]


def shared(old: dict, replaced: dict) -> dict:
    """`old` with some top-level fields and metadata fields replaced, the rest the very same objects (as
    an update through a subresource keeps them)."""
    new = {**old, **{k: v for k, v in replaced.items() if k != "metadata"}}
    new["metadata"] = {**(old.get("metadata") or {}), **(replaced.get("metadata") or {})}
    return new


@settings(max_examples=300, deadline=None)
@given(old=_pod, new=_pod, reset=st.sampled_from(RESETS))
def test_changes_are_what_comparing_every_leaf_gives(old: dict, new: dict, reset: frozenset[str]) -> None:
    assert ssa.changes(old, new, PODS.apply_schema, reset) == defined_changes(
        old, new, PODS.apply_schema, reset
    )


@settings(max_examples=300, deadline=None)
@given(old=_pod, replaced=_pod, reset=st.sampled_from(RESETS))
def test_changes_of_objects_sharing_their_unchanged_parts(
    old: dict, replaced: dict, reset: frozenset[str]
) -> None:
    new = shared(old, replaced)
    assert ssa.changes(old, new, PODS.apply_schema, reset) == defined_changes(
        old, new, PODS.apply_schema, reset
    )


def test_values_equal_in_python_but_spelled_differently_are_changes() -> None:
    """A set's `v:` key and a map list's `k:` key spell the value: 1 and True are different members."""
    schema = PODS.apply_schema
    old = {
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "args": ["1"], "ports": [{"containerPort": 1}]}]},
    }
    new = copy.deepcopy(old)
    new["spec"]["containers"][0]["ports"][0]["containerPort"] = True
    new["metadata"]["finalizers"] = [1.0]
    old["metadata"]["finalizers"] = [1]
    assert old == new
    changed, gone = ssa.changes(old, new, schema)
    assert (changed, gone) == defined_changes(old, new, schema, frozenset())
    assert changed and gone


@settings(max_examples=200, deadline=None)
@given(
    old=_pod,
    replaced=_pod,
    creator=_pod,
    manager=st.sampled_from(["kubelet", "creator", "other"]),
    subresource=st.sampled_from(["", "status"]),
    share=st.booleans(),
)
def test_track_update_gives_the_entries_the_definition_gives(
    old: dict, replaced: dict, creator: dict, manager: str, subresource: str, share: bool
) -> None:
    """With two managers before (the creator's whole object, and an "other" owning the labels through the
    status subresource), in any order of their field sets' keys."""
    reset = ssa.reset_fields(True, subresource)
    old = copy.deepcopy(old)
    old.setdefault("metadata", {})["managedFields"] = [
        ssa._entry("creator", "Update", "v1", ssa._object_fields(creator, PODS.apply_schema)),
        ssa._entry("other", "Update", "v1", {"f:metadata": {"f:labels": {}}}, "status"),
    ]
    new = shared(old, replaced) if share else {**replaced, "metadata": {**(replaced.get("metadata") or {})}}
    new.setdefault("metadata", {})
    expected = defined_update(old, new, manager, subresource, reset)
    ssa.track_update(old, new, manager, subresource, PODS.apply_schema, reset)
    got = new["metadata"].get("managedFields", [])
    # Compared as bytes: the key order of every field set is part of what is stored and served.
    fields = [json.dumps(m["fieldsV1"]) for m in got]
    assert fields == [json.dumps(m["fieldsV1"]) for m in expected]
    assert [m.get("manager") for m in got[:-1]] == [m.get("manager") for m in expected[:-1]]


def test_a_lease_renewal_changes_renew_time_alone_and_a_new_holder_takes_it_over() -> None:
    schema = LEASES.apply_schema
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "n1",
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u"}],
        },
        "spec": {
            "holderIdentity": "n1",
            "leaseDurationSeconds": 40,
            "renewTime": "2026-12-06T10:00:00.000000Z",
        },
    }
    ssa.track_update(None, lease, "kubelet", schema=schema)
    renewed = copy.deepcopy(lease)
    renewed["spec"]["renewTime"] = "2026-12-06T10:00:10.000000Z"
    assert ssa.changes(lease, renewed, schema) == ({("f:spec", "f:renewTime")}, set())
    ssa.track_update(lease, renewed, "kubelet", schema=schema)
    assert [m["fieldsV1"] for m in renewed["metadata"]["managedFields"]] == [
        m["fieldsV1"] for m in lease["metadata"]["managedFields"]
    ]
    taken = copy.deepcopy(renewed)
    taken["spec"]["holderIdentity"] = "n2"
    ssa.track_update(renewed, taken, "other", schema=schema)
    owners = {m["manager"]: ssa.leaves(m["fieldsV1"]) for m in taken["metadata"]["managedFields"]}
    assert owners["other"] == {("f:spec", "f:holderIdentity")}
    assert ("f:spec", "f:holderIdentity") not in owners["kubelet"] and ("f:spec", "f:renewTime") in owners[
        "kubelet"
    ]


@settings(max_examples=400, deadline=None)
@given(old=_status_pod, new=_status_pod)
def test_changes_below_map_lists_item_by_item(old: dict, new: dict) -> None:
    schema = PODS.apply_schema
    assert ssa.changes(old, new, schema) == defined_changes(old, new, schema, frozenset())
