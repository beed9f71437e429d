"""The StatefulSet controller's pure parts: names and ordinals, the pod made for an ordinal (identity
labels, hostname, subdomain, claim volumes, revision), claim ownership under each retention policy, the
status numbers, and `plan`'s steps: OrderedReady stopping at the first unhealthy pod, Parallel not
waiting, reverse-ordinal scale-down, the partitioned rolling update, OnDelete, a failed pod replaced, a
stale claim blocking a new pod."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.controllers.statefulset import identity, logic

Obj = dict[str, Any]
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def make_set(replicas: int = 3, **spec: Any) -> Obj:
    body: Obj = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "serviceName": "web",
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    body["spec"].update(spec)
    return body


def pod(ordinal: int, revision: str = "web-1", ready: bool = True, **status: Any) -> Obj:
    made = identity.new_pod(make_set(), ordinal, revision)
    made["metadata"]["uid"] = f"uid-{ordinal}"
    made["metadata"]["namespace"] = "ns"
    made["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        **status,
    }
    return made


def inputs(
    sts: Obj, pods: list[Obj], current: str = "web-1", update: str = "web-1", **kw: Any
) -> logic.Inputs:
    return logic.Inputs(
        sts=sts,
        current_set=sts,
        update_set=sts,
        current=current,
        update=update,
        pods=pods,
        claims=kw.pop("claims", {}),
        now=NOW,
        **kw,
    )


def steps(plan: logic.Plan) -> list[tuple[str, str]]:
    return [(s.verb, s.pod["metadata"]["name"]) for phase in plan.steps for s in phase]


# --- identity ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [("web-0", ("web", 0)), ("my-db-12", ("my-db", 12)), ("web", ("", -1)), ("web-x", ("", -1))],
)
def test_parent_and_ordinal(name: str, expected: tuple[str, int]) -> None:
    assert identity.parent_and_ordinal(name) == expected


def test_new_pod_identity_and_storage() -> None:
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    sts = make_set(volumeClaimTemplates=[claim])
    sts["spec"]["template"]["spec"]["volumes"] = [
        {"name": "data", "emptyDir": {}},
        {"name": "x", "emptyDir": {}},
    ]
    made = identity.new_pod(sts, 2, "web-abc")
    meta = made["metadata"]
    assert meta["name"] == "web-2" and meta["generateName"] == "web-"
    assert meta["labels"] == {
        "app": "web",
        "statefulset.kubernetes.io/pod-name": "web-2",
        "apps.kubernetes.io/pod-index": "2",
        "controller-revision-hash": "web-abc",
    }
    assert meta["ownerReferences"][0]["kind"] == "StatefulSet" and meta["ownerReferences"][0]["controller"]
    assert (made["spec"]["hostname"], made["spec"]["subdomain"]) == ("web-2", "web")
    assert made["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-2"}},
        {"name": "x", "emptyDir": {}},
    ]
    claims = identity.claims_for(sts, 2)
    assert claims["data"]["metadata"] == {"name": "data-web-2", "namespace": "ns", "labels": {"app": "web"}}
    assert identity.identity_matches(sts, made | {"metadata": {**meta, "namespace": "ns"}})
    relabelled = copy.deepcopy(made)
    relabelled["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] = "other"
    assert not identity.identity_matches(sts, relabelled)


@pytest.mark.parametrize(
    ("policy", "ordinal", "wanted"),
    [
        (("Retain", "Retain"), 0, []),
        (("Delete", "Retain"), 0, [("StatefulSet", "web")]),
        (("Delete", "Retain"), 5, [("StatefulSet", "web")]),
        (("Retain", "Delete"), 0, []),
        (("Retain", "Delete"), 5, [("Pod", "web-5")]),
        (("Delete", "Delete"), 0, [("StatefulSet", "web")]),
        (("Delete", "Delete"), 5, [("Pod", "web-5")]),
    ],
)
def test_claim_owners_follow_the_retention_policy(
    policy: tuple[str, str], ordinal: int, wanted: list[tuple[str, str]]
) -> None:
    sts = make_set(
        persistentVolumeClaimRetentionPolicy={"whenDeleted": policy[0], "whenScaled": policy[1]},
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}],
    )
    owner = pod(ordinal)
    claim = {"metadata": {"name": f"data-web-{ordinal}", "ownerReferences": [{"kind": "Other", "uid": "o"}]}}
    refs = identity.claim_owner_refs(claim, sts, owner)
    assert [(r["kind"], r["name"]) for r in refs if r["kind"] != "Other"] == wanted
    assert all(r["controller"] for r in refs if r["kind"] != "Other")
    assert {"kind": "Other", "uid": "o"} in refs  # someone else's reference stays
    fixed = {"metadata": {**claim["metadata"], "ownerReferences": refs}}
    assert identity.claim_owner_up_to_date(fixed, sts, owner)
    assert identity.claim_owner_up_to_date(claim, sts, owner) == (wanted == [])


def test_claim_with_a_foreign_controller_is_left_alone() -> None:
    sts = make_set(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Retain"})
    claim = {"metadata": {"ownerReferences": [{"kind": "X", "name": "x", "uid": "x", "controller": True}]}}
    assert identity.claim_owner_up_to_date(claim, sts, pod(0))
    assert identity.claim_owner_refs(claim, sts, pod(0)) == claim["metadata"]["ownerReferences"]


def test_stale_claim_only_under_when_scaled_delete() -> None:
    owned = {
        "metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "old"}]}
    }
    delete = make_set(persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"})
    assert identity.claim_is_stale(owned, delete, "web-1")
    assert not identity.claim_is_stale(owned, delete, "web-2")
    assert not identity.claim_is_stale(owned, make_set(), "web-1")
    assert not identity.claim_is_stale(None, delete, "web-1")


# --- status --------------------------------------------------------------------------------------------


def test_replica_status_counts() -> None:
    pods = [pod(0, "web-1"), pod(1, "web-2"), pod(2, "web-2", ready=False)]
    pods.append({**pod(3, "web-2"), "metadata": {**pod(3)["metadata"], "deletionTimestamp": "x"}})
    status = logic.replica_status(pods, 0, "web-1", "web-2", NOW)
    assert status == {
        "replicas": 4,
        "readyReplicas": 3,
        "availableReplicas": 3,
        "currentReplicas": 1,
        "updatedReplicas": 2,
    }
    young = pod(0)
    young["status"]["conditions"][0]["lastTransitionTime"] = (NOW - timedelta(seconds=5)).isoformat()
    assert logic.replica_status([young], 10, "web-1", "web-1", NOW)["availableReplicas"] == 0


def test_complete_rolling_update_moves_the_current_revision() -> None:
    status = {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "currentReplicas": 1}
    status |= {"currentRevision": "a", "updateRevision": "b"}
    logic.complete_rolling_update(make_set(), status)
    assert (status["currentRevision"], status["currentReplicas"]) == ("b", 3)
    partial = {
        "replicas": 3,
        "readyReplicas": 3,
        "updatedReplicas": 2,
        "currentRevision": "a",
        "updateRevision": "b",
    }
    logic.complete_rolling_update(make_set(), partial)
    assert partial["currentRevision"] == "a"


def test_wire_status_omits_empty_fields_but_keeps_replicas() -> None:
    assert logic.wire_status(
        {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "collisionCount": 0}
    ) == {
        "replicas": 0,
        "availableReplicas": 0,
        "collisionCount": 0,
    }


# --- the plan ------------------------------------------------------------------------------------------


def test_ordered_ready_creates_the_lowest_missing_ordinal_only() -> None:
    plan = logic.plan(inputs(make_set(), []))
    assert steps(plan) == [("create", "web-0")]
    plan = logic.plan(inputs(make_set(), [pod(0)]))
    assert steps(plan) == [("create", "web-1")]


def test_ordered_ready_waits_on_an_unready_pod() -> None:
    plan = logic.plan(inputs(make_set(), [pod(0, ready=False)]))
    assert steps(plan) == [] and plan.waiting_on == "web-0"
    pending = pod(0)
    pending["status"] = {"phase": "Pending"}
    assert steps(logic.plan(inputs(make_set(), [pending]))) == []
    # minReadySeconds: ready but not yet available blocks too
    young = pod(0)
    young["status"]["conditions"][0]["lastTransitionTime"] = NOW.isoformat()
    assert steps(logic.plan(inputs(make_set(minReadySeconds=30), [young]))) == []


def test_parallel_creates_every_missing_pod() -> None:
    plan = logic.plan(inputs(make_set(podManagementPolicy="Parallel"), [pod(1, ready=False)]))
    assert steps(plan) == [("create", "web-0"), ("create", "web-2")]


def test_failed_pod_is_deleted_then_recreated() -> None:
    failed = pod(1)
    failed["status"]["phase"] = "Failed"
    assert steps(logic.plan(inputs(make_set(), [pod(0), failed, pod(2)]))) == [("delete", "web-1")]


def test_scale_down_highest_ordinal_first_one_at_a_time() -> None:
    pods = [pod(i) for i in range(4)]
    assert steps(logic.plan(inputs(make_set(replicas=1), pods))) == [("delete", "web-3")]
    terminating = copy.deepcopy(pods)
    terminating[3]["metadata"]["deletionTimestamp"] = "x"
    assert steps(logic.plan(inputs(make_set(replicas=1), terminating))) == []
    parallel = make_set(replicas=1, podManagementPolicy="Parallel")
    assert steps(logic.plan(inputs(parallel, pods))) == [
        ("delete", "web-3"),
        ("delete", "web-2"),
        ("delete", "web-1"),
    ]


def test_scale_down_waits_for_unhealthy_pods_except_the_first() -> None:
    # both condemned pods unhealthy: web-2 is the first unhealthy pod, so web-3 (not it) waits
    pods = [pod(0), pod(1), pod(2, ready=False), pod(3, ready=False)]
    assert steps(logic.plan(inputs(make_set(replicas=2), pods))) == []
    # the first unhealthy pod itself may go
    pods = [pod(0), pod(1), pod(2), pod(3, ready=False)]
    assert steps(logic.plan(inputs(make_set(replicas=2), pods))) == [("delete", "web-3")]
    # an unhealthy replica stops everything before the condemned are looked at
    pods = [pod(0, ready=False), pod(1), pod(2), pod(3)]
    assert steps(logic.plan(inputs(make_set(replicas=2), pods))) == []


def test_rolling_update_from_the_top_honouring_the_partition() -> None:
    sts = make_set(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}})
    pods = [pod(0, "old"), pod(1, "old"), pod(2, "old")]
    plan = logic.plan(inputs(sts, pods, current="old", update="new"))
    assert steps(plan) == [("delete", "web-2")]
    assert plan.status["currentReplicas"] == 2
    pods[2] = pod(2, "new")
    assert steps(logic.plan(inputs(sts, pods, current="old", update="new"))) == [("delete", "web-1")]
    pods[1] = pod(1, "new")
    assert steps(logic.plan(inputs(sts, pods, current="old", update="new"))) == []  # web-0 is below
    pods[2] = pod(2, "new", ready=False)
    pods[1] = pod(1, "old")
    parallel = copy.deepcopy(sts)
    parallel["spec"]["podManagementPolicy"] = "Parallel"
    assert steps(logic.plan(inputs(parallel, pods, current="old", update="new"))) == []  # waits on web-2


def test_versioned_pod_below_the_partition_keeps_the_current_revision() -> None:
    current = make_set(updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 2}})
    update = copy.deepcopy(current)
    update["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:new"
    low = logic.versioned_pod(current, update, "old", "new", 1)
    high = logic.versioned_pod(current, update, "old", "new", 2)
    assert identity.revision_of(low) == "old" and low["spec"]["containers"][0]["image"] == "busybox"
    assert identity.revision_of(high) == "new" and high["spec"]["containers"][0]["image"] == "busybox:new"
    on_delete = make_set(updateStrategy={"type": "OnDelete"})
    assert identity.revision_of(logic.versioned_pod(on_delete, update, "old", "new", 0)) == "new"


def test_on_delete_never_deletes_for_an_update() -> None:
    sts = make_set(updateStrategy={"type": "OnDelete"})
    pods = [pod(i, "old") for i in range(3)]
    assert steps(logic.plan(inputs(sts, pods, current="old", update="new"))) == []


def test_identity_and_claim_owner_drift_are_fixed() -> None:
    sts = make_set(
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}],
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Retain"},
    )
    drifted = pod(0)
    drifted["metadata"]["labels"].pop("statefulset.kubernetes.io/pod-name")
    claims = {
        "data-web-0": {"metadata": {"name": "data-web-0"}},
        "data-web-1": {"metadata": {"name": "data-web-1"}},
    }
    plan = logic.plan(inputs(sts, [drifted, pod(1)], claims=claims))
    assert steps(plan) == [
        ("identity", "web-0"),
        ("owners", "web-0"),
        ("owners", "web-1"),
        ("create", "web-2"),
    ]


def test_a_stale_claim_blocks_the_new_pod() -> None:
    sts = make_set(
        replicas=2,
        volumeClaimTemplates=[{"metadata": {"name": "data"}, "spec": {}}],
        persistentVolumeClaimRetentionPolicy={"whenDeleted": "Retain", "whenScaled": "Delete"},
    )
    stale = {
        "metadata": {
            "name": "data-web-1",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "gone", "controller": True}
            ],
        }
    }
    plan = logic.plan(
        inputs(
            sts, [pod(0)], claims={"data-web-0": {"metadata": {"name": "data-web-0"}}, "data-web-1": stale}
        )
    )
    assert steps(plan) == []


def test_a_set_being_deleted_takes_no_steps() -> None:
    sts = make_set()
    sts["metadata"]["deletionTimestamp"] = "x"
    plan = logic.plan(inputs(sts, [pod(0)]))
    assert plan.steps == [] and plan.status["replicas"] == 1


def test_apply_revision_restores_the_template() -> None:
    sts = make_set()
    revision = {
        "data": {"spec": {"template": {"$patch": "replace", "spec": {"containers": [{"name": "old"}]}}}}
    }
    restored = logic.apply_revision(sts, revision)
    assert restored["spec"]["template"] == {"spec": {"containers": [{"name": "old"}]}}
    assert restored["spec"]["replicas"] == 3 and sts["spec"]["template"]["metadata"]
