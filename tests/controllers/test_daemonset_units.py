"""The DaemonSet controller's pure parts: which nodes fit (selector, affinity, taints and the daemon
tolerations), the pinned affinity, the per-node decisions, a rolling update's steps with maxUnavailable
and with maxSurge, the status numbers and the history's patch and clean-up."""

from __future__ import annotations

from datetime import UTC, datetime

from controlplane.controllers.daemonset import history, logic, placement
from controlplane.controllers.daemonset.controller import daemon_pod

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def node(name: str, labels: dict | None = None, taints: list | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


def ds(strategy: dict | None = None, **pod_spec: object) -> dict:
    return {
        "metadata": {
            "name": "d",
            "namespace": "ns",
            "uid": "u",
            "generation": 2,
            "annotations": {logic.TEMPLATE_GENERATION: "2"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "updateStrategy": strategy
            or {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [], **pod_spec}},
        },
    }


def pod(
    name: str,
    on: str,
    updated: bool = True,
    ready: bool = True,
    phase: str = "Running",
    created: str = "1",
    deleting: bool = False,
) -> dict:
    labels = {"app": "d", history.GENERATION_LABEL: "2" if updated else "1"}
    meta = {"name": name, "uid": name, "labels": labels, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "x"
    return {
        "metadata": meta,
        "spec": {"nodeName": on},
        "status": {
            "phase": phase,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-12-01T11:00:00Z",
                }
            ],
        },
    }


def test_placement() -> None:
    spec = {"nodeSelector": {"disk": "ssd"}}
    assert placement.should_run(node("a", {"disk": "ssd"}), spec) == (True, True)
    assert placement.should_run(node("b"), spec) == (False, False)
    no_schedule = node("c", taints=[{"key": "x", "effect": "NoSchedule"}])
    assert placement.should_run(no_schedule, {}) == (False, True)
    no_execute = node("d", taints=[{"key": "x", "effect": "NoExecute"}])
    assert placement.should_run(no_execute, {}) == (False, False)
    tolerated = {"tolerations": [{"key": "x", "operator": "Exists"}]}
    assert placement.should_run(no_execute, tolerated) == (True, True)
    # The daemon tolerations: a not-ready, unschedulable node under pressure still gets its pod.
    sick = node(
        "e",
        taints=[
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
        ],
    )
    assert placement.should_run(sick, {}) == (True, True)
    offline = node("f", taints=[{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}])
    assert placement.should_run(offline, {})[0] is False
    assert placement.should_run(offline, {"hostNetwork": True})[0] is True
    affinity = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}
                    ]
                }
            }
        }
    }
    assert placement.should_run(node("g", {"zone": "z1"}), affinity)[0] is True
    assert placement.should_run(node("h", {"zone": "z2"}), affinity)[0] is False
    assert placement.should_run(node("i"), {"nodeName": "j"}) == (False, False)


def test_daemon_pod_is_pinned_and_labelled() -> None:
    made = daemon_pod({**ds(), "apiVersion": "apps/v1", "kind": "DaemonSet"}, "n1", "abc")
    spec = made["spec"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    assert made["metadata"]["labels"] == {
        "app": "d",
        "controller-revision-hash": "abc",
        "pod-template-generation": "2",
    }
    assert len(spec["tolerations"]) == 6 and "nodeName" not in spec
    assert logic.target_node(made) == "n1"


def test_manage() -> None:
    nodes = [node("a"), node("b"), node("c"), node("gone", taints=[{"key": "x", "effect": "NoExecute"}])]
    pods = logic.by_node(
        [
            pod("p1", "b"),
            pod("p2", "b", created="2"),
            pod("p3", "c", phase="Failed"),
            pod("p4", "gone"),
            pod("p5", "vanished"),
        ]
    )
    plan = logic.manage(ds(), nodes, pods)
    assert plan.create_on == ["a"]
    assert sorted(p["metadata"]["name"] for p in plan.delete) == ["p2", "p3", "p4", "p5"]
    assert [(p["metadata"]["name"], n) for p, n in plan.failed] == [("p3", "c")]
    # A node whose only pod is terminating waits for it to go.
    assert logic.manage(ds(), [node("a")], logic.by_node([pod("t", "a", deleting=True)])).create_on == []


def test_rolling_update_with_max_unavailable() -> None:
    pods = logic.by_node(
        [pod("o1", "a", updated=False), pod("o2", "b", updated=False), pod("o3", "c", updated=False)]
    )
    plan = logic.rolling_update(ds(), pods, 3, "h", NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["o1"] and not plan.create_on
    # One node already replaced but its new pod not ready yet: nothing more goes.
    waiting = logic.by_node(
        [pod("n1", "a", ready=False), pod("o2", "b", updated=False), pod("o3", "c", updated=False)]
    )
    assert logic.rolling_update(ds(), waiting, 3, "h", NOW).delete == []
    # An unavailable old pod goes without counting against maxUnavailable, so one available one goes too.
    broken = logic.by_node(
        [
            pod("o1", "a", updated=False, ready=False),
            pod("o2", "b", updated=False),
            pod("o3", "c", updated=False),
        ]
    )
    assert [p["metadata"]["name"] for p in logic.rolling_update(ds(), broken, 3, "h", NOW).delete] == [
        "o1",
        "o2",
    ]


def test_rolling_update_with_surge() -> None:
    surge = ds({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    pods = logic.by_node([pod("o1", "a", updated=False), pod("o2", "b", updated=False)])
    assert logic.rolling_update(surge, pods, 2, "h", NOW).create_on == ["a"]
    both = logic.by_node(
        [pod("o1", "a", updated=False), pod("n1", "a", created="2"), pod("o2", "b", updated=False)]
    )
    plan = logic.rolling_update(surge, both, 2, "h", NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["o1"] and plan.create_on == ["b"]
    assert logic.bounds(surge, 10) == (1, 0)
    assert logic.bounds(
        ds({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0}}), 10
    ) == (0, 3)


def test_status_numbers() -> None:
    nodes = [node("a"), node("b"), node("c"), node("x", taints=[{"key": "k", "effect": "NoExecute"}])]
    pods = logic.by_node([pod("p1", "a"), pod("p2", "b", updated=False, ready=False), pod("p3", "x")])
    got = logic.status(ds(), nodes, pods, "h", NOW)
    assert got == {
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 2,
        "numberReady": 1,
        "numberMisscheduled": 1,
        "updatedNumberScheduled": 1,
        "numberAvailable": 1,
        "numberUnavailable": 2,
        "observedGeneration": 2,
    }


def test_history() -> None:
    d = ds()
    revision = history.new_revision(d, 3)
    assert revision["metadata"]["name"] == f"d-{history.template_hash(d)}" and revision["revision"] == 3
    assert revision["data"]["spec"]["template"]["$patch"] == "replace" and history.matches(d, revision)
    assert revision["metadata"]["labels"] == {
        "app": "d",
        "controller-revision-hash": history.template_hash(d),
    }
    old = [
        {"metadata": {"name": f"r{i}", "labels": {"controller-revision-hash": f"h{i}"}}, "revision": i}
        for i in range(1, 6)
    ]
    gone = history.to_delete(old, in_use={"h2"}, current="r5", limit=1)
    assert [r["metadata"]["name"] for r in gone] == ["r1", "r3"]


def test_failed_pod_backoff_doubles_per_node() -> None:
    backoff = logic.FailedPodBackoff()
    assert backoff.wait("ds/n1", 100.0) == 0
    backoff.step("ds/n1", 100.0)
    assert backoff.wait("ds/n1", 100.5) == 0.5 and backoff.wait("ds/n2", 100.5) == 0
    backoff.step("ds/n1", 101.0)
    backoff.step("ds/n1", 103.0)
    assert backoff.wait("ds/n1", 103.0) == 4.0
    for _ in range(20):
        backoff.step("ds/n1", 200.0)
    assert backoff.wait("ds/n1", 200.0) == 900.0
    backoff.step("ds/n1", 200.0 + 1801)  # idle for longer than twice the maximum: starts over
    assert backoff.wait("ds/n1", 2001.0) == 1.0
