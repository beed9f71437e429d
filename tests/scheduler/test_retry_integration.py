"""Why a pod stays Pending, and how it stops being Pending: messages, events, retries."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from kubeclient.quantity import milli_value
from tests.scheduler.conftest import preemption

pytestmark = pytest.mark.integration


def test_failed_scheduling_message_matches_upstream_form(cluster, start_scheduler):
    gpu = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    cluster.add_node("small", memory="1Gi")
    cluster.add_node("gpu1", taints=gpu)
    cluster.add_node("gpu2", taints=gpu)
    start_scheduler()
    cluster.create(cluster.pod("hungry", memory="2Gi"))
    expected = (
        "0/3 nodes are available: 1 Insufficient memory, 2 node(s) had untolerated taint {dedicated: gpu}."
        + preemption(3, no_victims=1, not_helpful=2)
    )
    assert cluster.wait_unschedulable("hungry") == expected
    ev = cluster.wait_event("hungry", "FailedScheduling")
    assert ev.type == "Warning"
    assert ev.message == expected
    assert cluster.get("hungry").status.phase == "Pending"


def test_no_nodes_at_all(cluster, start_scheduler, v1):
    if v1.list_node().items:
        pytest.skip("another test's nodes are still registered")
    start_scheduler()
    cluster.create(cluster.pod("alone"))
    assert cluster.wait_unschedulable("alone") == "no nodes available to schedule pods"


def test_pending_pod_bound_once_a_fitting_node_appears(cluster, start_scheduler):
    cluster.add_node("tiny", cpu="500m")
    start_scheduler()
    cluster.create(cluster.pod("big", cpu="2"))
    cluster.wait_unschedulable("big")
    roomy = cluster.add_node("roomy", cpu="4")
    assert cluster.wait_bound("big") == roomy
    assert cluster.wait_event("big", "Scheduled").message.endswith(f"/big to {roomy}")


def test_pending_pod_bound_once_a_pod_is_deleted(cluster, start_scheduler):
    node = cluster.add_node("one-slot", cpu="1")
    start_scheduler()
    cluster.create(cluster.pod("first", cpu="800m"))
    assert cluster.wait_bound("first") == node
    cluster.create(cluster.pod("second", cpu="800m"))
    cluster.wait_unschedulable("second")
    cluster.v1.delete_namespaced_pod("first", cluster.namespace, grace_period_seconds=0)
    assert cluster.wait_bound("second") == node


def test_pending_pod_bound_once_a_pod_finishes(cluster, start_scheduler):
    node = cluster.add_node("one-slot", cpu="1")
    start_scheduler()
    cluster.create(cluster.pod("job", cpu="800m", restartPolicy="Never"))
    assert cluster.wait_bound("job") == node
    cluster.create(cluster.pod("next", cpu="800m"))
    cluster.wait_unschedulable("next")
    # A finished pod holds no resources (the scheduler's watch excludes terminal pods).
    cluster.v1.patch_namespaced_pod_status("job", cluster.namespace, {"status": {"phase": "Succeeded"}})
    assert cluster.wait_bound("next") == node


def test_repeated_failures_update_one_event(cluster, start_scheduler):
    node = cluster.add_node("tiny", cpu="100m")
    cluster.create(cluster.pod("small", cpu="50m", nodeName=node))
    start_scheduler()
    cluster.create(cluster.pod("stuck", cpu="1"))
    cluster.wait_unschedulable("stuck")
    # A pod leaving the node frees cpu, which may help NodeResourcesFit: the scheduler retries after the
    # pod's backoff; the same message again bumps the count of the one FailedScheduling event instead
    # of adding events.
    cluster.v1.delete_namespaced_pod("small", cluster.namespace, grace_period_seconds=0)
    failed = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        failed = [e for e in cluster.events("stuck") if e.reason == "FailedScheduling"]
        if failed and (failed[0].count or 0) >= 2:
            break
        time.sleep(0.1)
    assert len(failed) == 1
    assert failed[0].count >= 2


def test_fifty_pods_racing_for_ten_slots_never_overcommit(cluster, start_scheduler):
    nodes = [cluster.add_node(f"n{i}", cpu="2", memory="4Gi") for i in range(5)]  # 2 x 1 cpu slots each
    start_scheduler()
    names = [f"racer-{i:02d}" for i in range(50)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: cluster.create(cluster.pod(n, cpu="1", memory="256Mi")), names))
    losers = []
    for name in names:
        pod = cluster.get(name)
        if not pod.spec.node_name:
            try:
                cluster.wait_unschedulable(name)
                losers.append(name)
            except AssertionError:
                # Bound while we waited: it won a slot.
                if not cluster.get(name).spec.node_name:
                    raise
    bound = cluster.bound_nodes()
    assert len(bound) == 10
    assert len(losers) == 40
    per_node = Counter(bound.values())
    assert per_node == Counter({n: 2 for n in nodes})
    for node in nodes:
        used = sum(
            milli_value(p.spec.containers[0].resources.requests["cpu"])
            for p in cluster.v1.list_namespaced_pod(cluster.namespace).items
            if p.spec.node_name == node
        )
        assert used <= 2000


def test_a_pod_it_cannot_read_does_not_stop_scheduling(cluster, start_scheduler):
    node = cluster.add_node("n")
    sched = start_scheduler()
    bad = cluster.pod("bad-quantity", cpu="lots")
    try:
        cluster.create(bad)
    except (
        Exception
    ) as err:  # an API server that validates quantities refuses it (400, upstream's text): fine too
        assert "quantities must match the regular expression" in str(err)
    cluster.create(cluster.pod("good"))
    assert cluster.wait_bound("good") == node
    if "bad-quantity" in {p.metadata.name for p in cluster.v1.list_namespaced_pod(cluster.namespace).items}:
        assert not cluster.get("bad-quantity").spec.node_name
        assert "handler failed" in sched.log()


def test_racing_another_binder_loses_no_pod_and_overcommits_nothing(cluster, start_scheduler):
    """Someone else binds some of the pending pods while the scheduler works on them: every pod ends up
    bound once or reported Unschedulable, and the scheduler's nodes stay within their slots."""
    nodes = [cluster.add_node(f"n{i}", cpu="2") for i in range(3)]  # 6 one-cpu slots
    other = cluster.add_node("other", cpu="64", taints=[{"key": "manual", "effect": "NoSchedule"}])
    names = [f"pod-{i:02d}" for i in range(20)]
    for name in names:
        cluster.create(cluster.pod(name, cpu="1"))
    start_scheduler()
    stolen = set()
    for name in names[::2]:  # bind every other pod ourselves, racing the scheduler
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": other},
        }
        try:
            cluster.v1.create_namespaced_binding(cluster.namespace, body, _preload_content=False)
            stolen.add(name)
        except Exception as err:  # the scheduler got there first
            assert "already assigned" in str(err)
    # A binding refused because we got there first frees the slot the scheduler had assumed; the pods it
    # refused meanwhile are retried (after backoff), so every slot ends up used.
    expected = min(6, len(names) - len(stolen))
    deadline = time.monotonic() + 30
    while True:
        bound = cluster.bound_nodes()
        per_node = Counter(node for node in bound.values() if node != other)
        assert all(per_node[n] <= 2 for n in nodes), per_node  # never overcommitted, at any moment
        if sum(per_node.values()) == expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sum(per_node.values()) == expected
    assert {n for n, node in bound.items() if node == other} == stolen
    for name in set(names) - set(bound):
        cluster.wait_unschedulable(name)  # the rest say why they wait


def test_a_deleted_node_is_no_longer_offered(cluster, start_scheduler):
    doomed = cluster.add_node("doomed", cpu="8")
    small = cluster.add_node("small", cpu="1")
    start_scheduler()
    cluster.create(cluster.pod("first", cpu="2"))
    assert cluster.wait_bound("first") == doomed
    cluster.v1.delete_node(doomed)
    cluster.create(cluster.pod("second", cpu="2"))
    assert cluster.wait_unschedulable(
        "second"
    ) == "0/1 nodes are available: 1 Insufficient cpu." + preemption(1, no_victims=1)
    assert small in cluster.nodes
