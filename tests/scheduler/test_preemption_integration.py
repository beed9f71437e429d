"""DefaultPreemption through the real API server with an agent-less node: the victim gets the
DisruptionTarget condition and a Preempted event and is deleted, the preemptor is nominated to the
node and binds there; preemptionPolicy Never only waits."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from e2e.waiting import wait_for
from tests.scheduler.conftest import WAIT

pytestmark = pytest.mark.integration


@pytest.fixture
def classes(v1: client.CoreV1Api) -> Iterator[dict[str, str]]:
    api = client.SchedulingV1Api(v1.api_client)
    suffix = uuid.uuid4().hex[:6]
    made = {}
    for role, value, policy in (("low", 10, None), ("high", 1000, None), ("never", 1000, "Never")):
        name = f"sched-{role}-{suffix}"
        body = {"metadata": {"name": name}, "value": value}
        if policy:
            body["preemptionPolicy"] = policy
        api.create_priority_class(body)
        made[role] = name
    yield made
    for name in made.values():
        api.delete_priority_class(name)


def wait_gone(cluster, name: str, timeout: float = WAIT) -> None:
    def gone() -> bool:
        try:
            cluster.get(name)
        except client.ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(gone, timeout, 0.05, f"pod {name} gone")


def test_preempts_a_lower_priority_pod(cluster, start_scheduler, classes):
    node = cluster.add_node("a", cpu="1")
    start_scheduler()
    # The victim's grace period is 0: with no kubelet on this node nothing else would finish it.
    cluster.create(
        cluster.pod("victim", cpu="800m", priorityClassName=classes["low"], terminationGracePeriodSeconds=0)
    )
    assert cluster.wait_bound("victim") == node
    cluster.create(cluster.pod("preemptor", cpu="800m", priorityClassName=classes["high"]))
    preemptor_uid = cluster.get("preemptor").metadata.uid
    event = cluster.wait_event("victim", "Preempted")
    assert event.message == f"Preempted by pod {preemptor_uid} on node {node}"
    assert event.type == "Normal"
    wait_gone(cluster, "victim")
    assert cluster.wait_bound("preemptor") == node
    failed = cluster.wait_event("preemptor", "FailedScheduling")
    assert failed.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_victim_gets_disruption_target_and_nomination_is_set(cluster, start_scheduler, classes):
    node = cluster.add_node("a", cpu="1")
    start_scheduler()
    # A grace period keeps the victim visible (terminating) long enough to read its condition.
    cluster.create(
        cluster.pod("victim", cpu="800m", priorityClassName=classes["low"], terminationGracePeriodSeconds=300)
    )
    assert cluster.wait_bound("victim") == node
    cluster.create(cluster.pod("preemptor", cpu="800m", priorityClassName=classes["high"]))

    def marked() -> client.V1Pod | None:
        victim = cluster.get("victim")
        return victim if victim.metadata.deletion_timestamp else None

    victim = wait_for(marked, WAIT, 0.05, "the victim marked for deletion")
    conditions = {c.type: c for c in victim.status.conditions or ()}
    target = conditions["DisruptionTarget"]
    assert (target.status, target.reason) == ("True", "PreemptionByScheduler")
    assert target.message == "default-scheduler: preempting to accommodate a higher priority pod"
    assert victim.metadata.deletion_timestamp is not None
    wait_for(
        lambda: cluster.get("preemptor").status.nominated_node_name == node, WAIT, 0.05, "the nominated node"
    )
    # The kubelet's part, which this node lacks: the victim finishes; the preemptor takes its room.
    cluster.v1.delete_namespaced_pod("victim", cluster.namespace, grace_period_seconds=0)
    assert cluster.wait_bound("preemptor") == node


def test_preemption_policy_never_waits(cluster, start_scheduler, classes):
    node = cluster.add_node("a", cpu="1")
    start_scheduler()
    cluster.create(cluster.pod("low", cpu="800m", priorityClassName=classes["low"]))
    assert cluster.wait_bound("low") == node
    cluster.create(cluster.pod("polite", cpu="800m", priorityClassName=classes["never"]))
    assert cluster.wait_unschedulable("polite") == (
        "0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.."
    )
    assert cluster.get("low").metadata.deletion_timestamp is None


@pytest.mark.parametrize("budget", [True, False], ids=["with-budget", "without"])
def test_a_disruption_budget_steers_preemption_to_the_victim_it_does_not_protect(
    cluster, start_scheduler, classes, budget: bool
):
    """Two nodes, each full with one lower-priority pod. Without a budget, upstream's second criterion
    (the lowest highest-priority victim) picks the node of the lower one; a PodDisruptionBudget that
    would be violated by evicting it (no disruption allowed) outranks that: the fewest budget violations
    come first, so the other node's pod is preempted instead and the guarded one stays."""
    scheduling = client.SchedulingV1Api(cluster.v1.api_client)
    mid = f"sched-mid-{uuid.uuid4().hex[:6]}"
    scheduling.create_priority_class({"metadata": {"name": mid}, "value": 20})
    try:
        a = cluster.add_node("a", cpu="1")
        b = cluster.add_node("b", cpu="1")
        for name, node, priority in (("guarded", a, classes["low"]), ("other", b, mid)):
            pod = cluster.pod(
                name,
                cpu="800m",
                priorityClassName=priority,
                nodeName=node,
                labels={"app": name},
                terminationGracePeriodSeconds=0,
            )
            cluster.create(pod)
        if budget:  # no disruption controller runs here: its status allows none, as a fresh budget's
            client.PolicyV1Api(cluster.v1.api_client).create_namespaced_pod_disruption_budget(
                cluster.namespace,
                {
                    "metadata": {"name": "keep"},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
                },
            )
        start_scheduler()  # after the budget: the scheduler's informers have it when the preemptor comes
        cluster.create(cluster.pod("preemptor", cpu="800m", priorityClassName=classes["high"]))
        victim, kept, node = ("other", "guarded", b) if budget else ("guarded", "other", a)
        preemptor_uid = cluster.get("preemptor").metadata.uid
        event = cluster.wait_event(victim, "Preempted")
        assert event.message == f"Preempted by pod {preemptor_uid} on node {node}"
        wait_gone(cluster, victim)
        assert cluster.wait_bound("preemptor") == node
        assert cluster.get(kept).metadata.deletion_timestamp is None
    finally:
        scheduling.delete_priority_class(mid)
