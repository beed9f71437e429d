"""Pod GC's choices without an API server: which terminated pods go first, which terminating ones are
collected, and the quarantine a missing node waits out."""

from __future__ import annotations

from controlplane.controllers import podgc


def pod(
    name: str,
    phase: str = "Running",
    created: str = "2025-01-01T00:00:00Z",
    node: str = "n1",
    deleting: bool = False,
    reason: str = "",
) -> dict:
    meta = {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    status = {"phase": phase, **({"reason": reason} if reason else {})}
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def names(pods: list[dict]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_terminated_beyond_the_threshold_evicted_first_then_oldest_then_by_name():
    pods = [
        pod("new-ok", "Succeeded", "2025-01-03T00:00:00Z"),
        pod("old-failed", "Failed", "2025-01-01T00:00:00Z"),
        pod("b-same-time", "Succeeded", "2025-01-02T00:00:00Z"),
        pod("a-same-time", "Failed", "2025-01-02T00:00:00Z"),
        pod("evicted", "Failed", "2025-01-04T00:00:00Z", reason="Evicted"),
        pod("running", "Running", "2024-01-01T00:00:00Z"),
        pod("pending", "Pending", "2024-01-01T00:00:00Z"),
        pod("unknown", "Unknown", "2024-01-01T00:00:00Z"),
    ]
    assert names(podgc.terminated_to_delete(pods, 2)) == ["evicted", "old-failed", "a-same-time"]
    assert podgc.terminated_to_delete(pods, 5) == []
    assert podgc.terminated_to_delete(pods, 6) == []


def test_an_empty_phase_counts_as_terminated_as_upstream():
    assert podgc.is_terminated(pod("x", phase=""))


def test_terminating_on_out_of_service_nodes_only():
    out_of_service = {
        "metadata": {"name": "oos"},
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
            ]
        },
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    ready_tainted = {
        **out_of_service,
        "metadata": {"name": "ready"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    plain_down = {
        "metadata": {"name": "down"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    nodes = {"oos": out_of_service, "ready": ready_tainted, "down": plain_down}
    pods = [
        pod("a", node="oos", deleting=True),
        pod("b", node="oos"),
        pod("c", node="ready", deleting=True),
        pod("d", node="down", deleting=True),
        pod("e", node="absent", deleting=True),
    ]
    assert names(podgc.terminating_out_of_service(pods, nodes)) == ["a"]


def test_orphans_and_unscheduled_terminating():
    pods = [pod("a", node="gone"), pod("b", node="n1"), pod("c", node=""), pod("d", node="", deleting=True)]
    assert podgc.missing_nodes([n for p in pods for n in podgc.by_node_name(p)], {"n1"}) == {"gone"}
    assert names(podgc.unscheduled_terminating(pods)) == ["d"]


def test_a_pass_reads_the_pods_each_rule_may_concern_by_index():
    """The collector's index holds a pod under each rule that may concern it (an empty phase counts as
    terminated); a running pod is under none, so a pass never reads it."""
    assert podgc.by_gc_state(pod("run")) == []
    assert podgc.by_gc_state(pod("done", "Succeeded")) == [podgc.TERMINATED]
    assert podgc.by_gc_state(pod("blank", "")) == [podgc.TERMINATED]
    assert podgc.by_gc_state(pod("going", deleting=True)) == [podgc.TERMINATING]
    assert podgc.by_gc_state(pod("both", "Failed", deleting=True)) == [podgc.TERMINATED, podgc.TERMINATING]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_quarantine_hands_a_name_out_once_after_its_time_and_noting_again_never_postpones():
    clock = Clock()
    quarantine = podgc.Quarantine(40.0, clock)
    quarantine.note({"gone"})
    clock.now = 20.0
    quarantine.note({"gone"})  # still missing 20 s later: the first deadline stands
    assert quarantine.drain() == set()
    clock.now = 40.0
    quarantine.note({"gone"})
    assert quarantine.drain() == {"gone"}
    assert quarantine.drain() == set()
    clock.now = 79.0
    assert quarantine.drain() == set()
    clock.now = 80.0
    assert quarantine.drain() == {"gone"}  # noted again at 40 s
