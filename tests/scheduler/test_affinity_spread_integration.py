"""InterPodAffinity and PodTopologySpread through the real API server with agent-less nodes; messages
compared with upstream 1.32's for the same situation."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from kubernetes.client import ApiException

from e2e.waiting import wait_for
from tests.scheduler.conftest import WAIT

pytestmark = pytest.mark.integration

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
WEB = {"app": "web"}


def anti_web(key: str = HOST) -> dict:
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": WEB}, "topologyKey": key}
            ]
        }
    }


def test_anti_affinity_spreads_three_replicas_over_two_nodes(cluster, start_scheduler):
    nodes = {cluster.add_node(n) for n in ("a", "b")}
    start_scheduler()
    for i in range(3):
        cluster.create(cluster.pod(f"web-{i}", labels=WEB, affinity=anti_web()))

    # Two bind (one per node); the third is refused, whichever of the three it is.
    def two_bound() -> dict[str, str] | None:
        bound = cluster.bound_nodes()
        return bound if len(bound) >= 2 else None

    bound = wait_for(two_bound, WAIT, 0.05, "two of the three bound")
    pending = [f"web-{i}" for i in range(3) if f"web-{i}" not in bound]
    assert set(bound.values()) == nodes and len(pending) == 1
    message = cluster.wait_unschedulable(pending[0])
    assert message == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )
    # A pod without anti-affinity that the placed pods' terms do not select still schedules.
    cluster.create(cluster.pod("other", labels={"app": "other"}))
    assert cluster.wait_bound("other") in nodes


def test_affinity_colocates_with_its_target(cluster, start_scheduler):
    cluster.add_node("a", labels={ZONE: "z1"})
    cluster.add_node("b", labels={ZONE: "z2"})
    target = cluster.add_node("c", labels={ZONE: "z3"})
    start_scheduler()
    cluster.create(cluster.pod("cache", labels={"app": "cache"}, nodeName=target))
    wants = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    for i in range(3):
        cluster.create(cluster.pod(f"web-{i}", labels=WEB, affinity=wants))
    assert {cluster.wait_bound(f"web-{i}") for i in range(3)} == {target}
    # Affinity to what does not exist: unresolvable, so preemption cannot help.
    lonely = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "nowhere"}}, "topologyKey": ZONE}
            ]
        }
    }
    cluster.create(cluster.pod("lonely", labels=WEB, affinity=lonely))
    assert cluster.wait_unschedulable("lonely") == (
        "0/3 nodes are available: 3 node(s) didn't match pod affinity rules. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
    )


def spread(max_skew: int = 1, key: str = ZONE, **extra) -> list[dict]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": WEB},
            **extra,
        }
    ]


def test_spread_max_skew_one_across_zones(cluster, start_scheduler):
    zone_of = {}
    for name, zone in (("a1", "z1"), ("a2", "z1"), ("b1", "z2"), ("c1", "z3")):
        zone_of[cluster.add_node(name, labels={ZONE: zone})] = zone
    start_scheduler()
    for i in range(6):
        cluster.create(cluster.pod(f"web-{i}", labels=WEB, topologySpreadConstraints=spread()))
        cluster.wait_bound(f"web-{i}")
    per_zone = Counter(zone_of[n] for n in cluster.bound_nodes().values())
    assert per_zone == Counter({"z1": 2, "z2": 2, "z3": 2})


def test_spread_min_domains_keeps_pods_pending_until_enough_zones(cluster, start_scheduler):
    cluster.add_node("a", labels={ZONE: "z1"})
    cluster.add_node("b", labels={ZONE: "z2"})
    start_scheduler()
    for i in range(3):
        cluster.create(cluster.pod(f"web-{i}", labels=WEB, topologySpreadConstraints=spread(minDomains=3)))
    # Two zones of the three wanted: the global minimum is 0, so each zone takes one pod only.
    cluster.wait_bound("web-0")
    cluster.wait_bound("web-1")
    assert cluster.wait_unschedulable("web-2") == (
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )
    third = cluster.add_node("c", labels={ZONE: "z3"})
    assert cluster.wait_bound("web-2") == third


def test_spread_on_a_key_no_node_has_stays_pending_and_the_queue_goes_on(cluster, start_scheduler):
    node = cluster.add_node("a", labels={ZONE: "z1"})
    start_scheduler()
    cluster.create(cluster.pod("bad", labels=WEB, topologySpreadConstraints=spread(key="example.com/rack")))
    assert cluster.wait_unschedulable("bad") == (
        "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required "
        "label). preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.."
    )
    cluster.create(cluster.pod("good", labels=WEB))
    assert cluster.wait_bound("good") == node


@pytest.mark.parametrize(
    ("spec", "field", "detail"),
    [
        (
            {"affinity": anti_web("")},
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "Required value: can not be empty",
        ),
        (
            {
                "affinity": {
                    "podAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]},
                                "topologyKey": HOST,
                            }
                        ]
                    }
                }
            },
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].operator",
            'Invalid value: "Bogus": not a valid selector operator',
        ),
        (
            {"topologySpreadConstraints": spread(max_skew=0)},
            "spec.topologySpreadConstraints[0].maxSkew",
            "Invalid value: 0: must be greater than zero",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {**spread()[0], "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}
                ]
            },
            "spec.topologySpreadConstraints[0].minDomains",
            "Invalid value: 2: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
        ),
    ],
)
def test_bad_affinity_and_spread_are_refused_with_upstreams_422(cluster, spec, field, detail):
    with pytest.raises(ApiException) as err:
        cluster.create(cluster.pod("bad", labels=WEB, **spec))
    assert err.value.status == 422
    body = json.loads(err.value.body)
    causes = [(c["field"], c["message"]) for c in body["details"]["causes"]]
    assert (field, detail) in causes, causes


def test_waiting_pods_wake_on_the_changes_that_may_help_them(cluster, start_scheduler):
    """Queueing hints: a pod waiting for an affinity target is retried once a matching pod is placed;
    one waiting for a node label, once a node gets it (long before the 5-minute flush)."""
    cluster.add_node("a", labels={ZONE: "z1"})
    other = cluster.add_node("b", labels={ZONE: "z2"})
    start_scheduler()
    wants = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    cluster.create(cluster.pod("web", labels=WEB, affinity=wants))
    cluster.create(cluster.pod("ssd", nodeSelector={"disk": "ssd"}))
    cluster.wait_unschedulable("web")
    cluster.wait_unschedulable("ssd")
    cluster.create(cluster.pod("cache", labels={"app": "cache"}, nodeName=other))
    assert cluster.wait_bound("web") == other
    cluster.patch_node(other, {"metadata": {"labels": {"disk": "ssd"}}})
    assert cluster.wait_bound("ssd") == other


def test_a_pod_waiting_for_its_affinity_target_follows_it_once_the_scheduler_places_it(
    cluster, start_scheduler
):
    cluster.add_node("a", labels={ZONE: "z1"})
    cluster.add_node("b", labels={ZONE: "z2"})
    start_scheduler()
    wants = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": HOST}
            ]
        }
    }
    cluster.create(cluster.pod("web", labels=WEB, affinity=wants))
    cluster.wait_unschedulable("web")
    cluster.create(cluster.pod("cache", labels={"app": "cache"}))
    assert cluster.wait_bound("web") == cluster.wait_bound("cache")
