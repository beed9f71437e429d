"""The ReplicaSet controller's pure parts: slow-start batches, status arithmetic, expectations, and
upstream's order of which pods a scale-down deletes first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from controlplane.controllers.expectations import Expectations
from controlplane.controllers.ranking import pods_to_delete
from controlplane.controllers.replicaset import calculate_status, slow_start_batches

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def ts(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    node: str = "n1",
    phase: str = "Running",
    ready: bool | None = True,
    ready_ago: float = 3600,
    created_ago: float = 7200,
    restarts: int = 0,
    cost: int | None = None,
    labels: dict | None = None,
) -> dict:
    conditions = (
        []
        if ready is None
        else [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts(ready_ago)}]
    )
    annotations = {"controller.kubernetes.io/pod-deletion-cost": str(cost)} if cost is not None else {}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": ts(created_ago),
            "annotations": annotations,
            "labels": labels or {"app": "web"},
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": "c", "restartCount": restarts}],
        },
    }


def victims(pods: list[dict], count: int, related: list[dict] | None = None) -> list[str]:
    return [p["metadata"]["name"] for p in pods_to_delete(pods, related or pods, count, NOW)]


def test_slow_start_doubles_until_the_count() -> None:
    assert slow_start_batches(1) == [1]
    assert slow_start_batches(10) == [1, 2, 4, 3]
    assert slow_start_batches(500) == [1, 2, 4, 8, 16, 32, 64, 128, 245]
    assert slow_start_batches(0) == []


def test_deletion_order_follows_upstreams_ranking() -> None:
    running = pod("running")
    assert victims([running, pod("unscheduled", node="")], 1) == ["unscheduled"]
    assert victims([running, pod("pending", phase="Pending", ready=None)], 1) == ["pending"]
    assert victims([pod("unknown", phase="Unknown"), pod("pending", phase="Pending")], 1) == ["pending"]
    assert victims([running, pod("unready", ready=False)], 1) == ["unready"]
    assert victims([pod("costly", cost=100), pod("cheap", cost=-5)], 1) == ["cheap"]
    assert victims([pod("restarts", restarts=5), pod("steady")], 1) == ["restarts"]
    # Ready for 30 s is deleted before ready for an hour; 1 h vs 1.1 h fall in one log2 bucket.
    assert victims([pod("old", ready_ago=3600), pod("fresh", ready_ago=30)], 1) == ["fresh"]
    same_bucket = victims(
        [pod("b", ready_ago=3600, created_ago=9000), pod("a", ready_ago=3700, created_ago=9000)], 1
    )
    assert same_bucket == ["a"]  # same bucket, same age bucket: the UID decides
    assert victims([pod("older", created_ago=90000), pod("newer", created_ago=60, ready=False)], 1) == [
        "newer"
    ]


def test_doubled_up_pods_go_before_lone_ones() -> None:
    lone = pod("lone", node="n1")
    doubled = [pod("d1", node="n2"), pod("d2", node="n2")]
    assert victims([lone, *doubled], 1)[0] in ("d1", "d2")
    # Siblings of another ReplicaSet of the same Deployment count too.
    sibling = pod("sibling", node="n1")
    assert victims([lone, doubled[0]], 1, related=[lone, sibling, doubled[0]]) == ["lone"]


def test_status_counts_and_replica_failure_condition() -> None:
    owner = {
        "metadata": {"generation": 4},
        "spec": {
            "replicas": 3,
            "minReadySeconds": 600,
            "template": {"metadata": {"labels": {"app": "web", "tier": "a"}}},
        },
    }
    pods = [
        pod("a", labels={"app": "web", "tier": "a"}, ready_ago=900),
        pod("b", ready_ago=60),
        pod("c", ready=False),
    ]
    status = calculate_status(owner, pods, None)
    assert {
        k: status[k] for k in ("replicas", "fullyLabeledReplicas", "readyReplicas", "observedGeneration")
    } == {"replicas": 3, "fullyLabeledReplicas": 1, "readyReplicas": 2, "observedGeneration": 4}
    failed = calculate_status(owner, pods, ("FailedCreate", 'pods "web-x" is forbidden: quota'))
    (cond,) = failed["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("ReplicaFailure", "True", "FailedCreate")
    cleared = calculate_status({**owner, "status": failed}, pods, None)
    assert "conditions" not in cleared


def test_expectations_hold_until_observed_or_expired() -> None:
    now = [0.0]
    e = Expectations(clock=lambda: now[0], timeout=300)
    assert e.satisfied("ns/rs")  # never asked
    e.expect_creations("ns/rs", 2)
    assert not e.satisfied("ns/rs")
    e.creation_observed("ns/rs")
    assert not e.satisfied("ns/rs")
    e.creation_observed("ns/rs")
    assert e.satisfied("ns/rs")
    e.expect_deletions("ns/rs", ["ns/p1"])
    e.deletion_observed("ns/rs", "ns/other")  # not one we deleted
    assert not e.satisfied("ns/rs")
    now[0] = 301  # a lost watch event cannot wedge the controller
    assert e.satisfied("ns/rs")
