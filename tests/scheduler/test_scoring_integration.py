"""Scoring through the real API server: the configured strategy decides, and replicas spread."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.scheduler.conftest import scheduler_config

pytestmark = pytest.mark.integration


def _half_full_and_empty(cluster):
    fuller = cluster.add_node("fuller", cpu="4", memory="8Gi")
    emptier = cluster.add_node("emptier", cpu="4", memory="8Gi")
    cluster.create(cluster.pod("existing", cpu="2", memory="4Gi", nodeName=fuller))
    return fuller, emptier


def test_least_allocated_picks_the_emptier_node(cluster, start_scheduler):
    fuller, emptier = _half_full_and_empty(cluster)
    start_scheduler()  # LeastAllocated is the default
    for i in range(3):
        cluster.create(cluster.pod(f"p{i}", cpu="200m", memory="400Mi"))
        assert cluster.wait_bound(f"p{i}") == emptier


def test_most_allocated_picks_the_fuller_node(cluster, start_scheduler):
    fuller, emptier = _half_full_and_empty(cluster)
    start_scheduler(scheduler_config("MostAllocated"))
    for i in range(3):
        cluster.create(cluster.pod(f"p{i}", cpu="200m", memory="400Mi"))
        assert cluster.wait_bound(f"p{i}") == fuller


def test_pods_of_one_service_spread_even_when_packing(cluster, start_scheduler):
    nodes = [cluster.add_node(n) for n in ("a", "b", "c")]
    # MostAllocated alone would stack every pod on one node; PodTopologySpread's default constraints
    # (by the selector of the Service selecting the pods) must win over it.
    cluster.v1.create_namespaced_service(
        cluster.namespace,
        {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}},
    )
    start_scheduler(
        scheduler_config("MostAllocated", only=["NodeResourcesFit", "PodTopologySpread"], PodTopologySpread=2)
    )
    for i in range(6):
        cluster.create(cluster.pod(f"rs-{i}", cpu="100m", memory="200Mi", labels={"app": "web"}))
        cluster.wait_bound(f"rs-{i}")
    for i in range(4):  # the control: pods no Service selects pack onto one node
        cluster.create(cluster.pod(f"lone-{i}", cpu="100m", memory="200Mi"))
        cluster.wait_bound(f"lone-{i}")
    bound = cluster.bound_nodes()
    replicas = Counter(n for p, n in bound.items() if p.startswith("rs-"))
    assert replicas == Counter({n: 2 for n in nodes})
    lone = {n for p, n in bound.items() if p.startswith("lone-")}
    assert len(lone) == 1


def test_preferred_node_affinity_and_prefer_no_schedule(cluster, start_scheduler):
    preferred = cluster.add_node("preferred", labels={"zone": "a"})
    tainted = cluster.add_node(
        "tainted",
        labels={"zone": "a"},
        taints=[{"key": "spot", "value": "true", "effect": "PreferNoSchedule"}],
    )
    other = cluster.add_node("other", labels={"zone": "b"})
    start_scheduler()
    affinity = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                }
            ]
        }
    }
    for i in range(3):
        cluster.create(cluster.pod(f"p{i}", affinity=affinity))
        assert cluster.wait_bound(f"p{i}") == preferred
    assert other != tainted
    # Tolerating the PreferNoSchedule taint removes the penalty; least allocated then favours `tainted`.
    cluster.create(
        cluster.pod(
            "tolerant",
            affinity=affinity,
            tolerations=[{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}],
        )
    )
    assert cluster.wait_bound("tolerant") == tainted


def test_image_locality(cluster, start_scheduler):
    size = 500 * 1024 * 1024
    with_image = cluster.add_node("cached", images=[("docker.io/library/bigimage:1.0", size)])
    cluster.add_node("cold")
    start_scheduler(scheduler_config(only=["ImageLocality"]))
    for i in range(3):
        cluster.create(cluster.pod(f"p{i}", image="bigimage:1.0"))
        assert cluster.wait_bound(f"p{i}") == with_image


def test_two_profiles_in_one_scheduler(cluster, start_scheduler):
    """KubeSchedulerConfiguration profiles: each schedulerName with its own scoring, one process; events
    name the pod's profile as their source; a pod naming no profile is left alone."""
    fuller, emptier = _half_full_and_empty(cluster)
    config = scheduler_config("LeastAllocated")
    packer = scheduler_config("MostAllocated")["profiles"][0]
    config["profiles"].append({**packer, "schedulerName": "packer"})
    start_scheduler(config)
    cluster.create(cluster.pod("spread", cpu="200m", memory="400Mi"))
    cluster.create(cluster.pod("packed", cpu="200m", memory="400Mi", schedulerName="packer"))
    assert cluster.wait_bound("spread") == emptier
    assert cluster.wait_bound("packed") == fuller
    assert cluster.wait_event("packed", "Scheduled").source.component == "packer"
    assert cluster.wait_event("spread", "Scheduled").source.component == "default-scheduler"
    cluster.create(cluster.pod("other", schedulerName="someone-else"))
    cluster.create(cluster.pod("after"))
    cluster.wait_bound("after")
    assert not cluster.get("other").spec.node_name
