"""Scheduling gates: the API server marks a gated pod PodScheduled=False/SchedulingGated at creation (as
upstream's pod strategy does); the scheduler does not try it until the gates are gone."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def scheduled_condition(cluster, name):
    return next(c for c in cluster.get(name).status.conditions or () if c.type == "PodScheduled")


def test_gated_pod_waits_for_its_gates(cluster, start_scheduler):
    node = cluster.add_node("a")
    start_scheduler()
    cluster.create(cluster.pod("gated", schedulingGates=[{"name": "example.com/quota"}]))
    condition = scheduled_condition(cluster, "gated")
    assert (condition.status, condition.reason, condition.message) == (
        "False",
        "SchedulingGated",
        "Scheduling is blocked due to non-empty scheduling gates",
    )
    # A pod created after it is scheduled: the queue went past the gated one without trying it.
    cluster.create(cluster.pod("plain"))
    assert cluster.wait_bound("plain") == node
    assert not cluster.get("gated").spec.node_name
    assert scheduled_condition(cluster, "gated").reason == "SchedulingGated"
    assert not [e for e in cluster.events("gated") if e.reason == "FailedScheduling"]
    cluster.v1.patch_namespaced_pod("gated", cluster.namespace, {"spec": {"schedulingGates": None}})
    assert cluster.wait_bound("gated") == node
    assert scheduled_condition(cluster, "gated").status == "True"
