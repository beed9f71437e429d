"""The node lifecycle controller's pure decisions: when a node's conditions go Unknown (and what they
say), which NoSchedule taints its conditions call for, zone states, and the rate-limited taint queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.controllers import nodehealth as nh
from controlplane.controllers import taints as tu
from controlplane.controllers.evictionqueue import EvictionQueue
from controlplane.controllers.nodehealth import NodeHealth, assess

T0 = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
GRACE, STARTUP = 50.0, 60.0


def ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    ready: str | None = "True",
    heartbeat: datetime = T0,
    created: datetime = T0 - timedelta(hours=1),
    extra: list[dict] | None = None,
) -> dict:
    conditions = (
        []
        if ready is None
        else [
            {
                "type": "Ready",
                "status": ready,
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": ts(heartbeat),
                "lastTransitionTime": ts(created),
            },
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "lastHeartbeatTime": ts(heartbeat),
                "lastTransitionTime": ts(created),
            },
        ]
    )
    return {
        "metadata": {"name": "n1", "uid": "u1", "creationTimestamp": ts(created)},
        "status": {"conditions": conditions + (extra or [])},
    }


def lease(renewed: datetime) -> dict:
    return {"metadata": {"name": "n1"}, "spec": {"renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def judge(n: dict, saved: NodeHealth | None, lease_: dict | None, at: datetime):
    return assess(n, saved, lease_, at, grace=GRACE, startup_grace=STARTUP)


def test_first_sight_starts_the_clock_now_whatever_the_heartbeat_says():
    # A heartbeat an hour old (or a clock skew): the controller only counts what it saw change.
    n = node(heartbeat=T0 - timedelta(hours=1))
    verdict = judge(n, None, None, T0)
    assert verdict.health.probe_timestamp == T0
    assert verdict.new_status is None
    assert verdict.observed_ready["status"] == "True"


def test_silent_for_the_grace_period_goes_unknown_with_upstream_texts():
    n = node()
    first = judge(n, None, None, T0)
    assert judge(n, first.health, None, T0 + timedelta(seconds=GRACE)).new_status is None  # not after yet
    later = T0 + timedelta(seconds=GRACE + 1)
    verdict = judge(n, first.health, None, later)
    assert verdict.new_status is not None
    by_type = {c["type"]: c for c in verdict.new_status["conditions"]}
    ready = by_type["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "Unknown",
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert ready["lastHeartbeatTime"] == ts(T0)  # kept
    assert ready["lastTransitionTime"] == ts(later)
    assert by_type["MemoryPressure"]["reason"] == "NodeStatusUnknown"
    # Conditions never posted are added as never updated; NetworkUnavailable is not the kubelet's.
    for type_ in ("DiskPressure", "PIDPressure"):
        cond = by_type[type_]
        assert (cond["status"], cond["reason"], cond["message"]) == (
            "Unknown",
            "NodeStatusNeverUpdated",
            "Kubelet never posted node status.",
        )
        assert cond["lastHeartbeatTime"] == n["metadata"]["creationTimestamp"]
    assert "NetworkUnavailable" not in by_type
    assert verdict.observed_ready["status"] == "True" and verdict.current_ready["status"] == "Unknown"
    # The node object itself is untouched (the caller writes new_status).
    assert n["status"]["conditions"][0]["status"] == "True"


def test_a_heartbeat_or_a_lease_renewal_restarts_the_clock():
    first = judge(node(), None, lease(T0), T0)
    at = T0 + timedelta(seconds=40)
    beat = judge(node(heartbeat=at), first.health, lease(T0), at)
    assert beat.health.probe_timestamp == at
    # Upstream forgets the lease at a heartbeat, so the next pass takes the same lease as renewed.
    again = judge(node(heartbeat=at), beat.health, lease(T0), at + timedelta(seconds=5))
    assert again.health.probe_timestamp == at + timedelta(seconds=5)
    # A renewal alone keeps a node alive even though its status is old.
    renewed_at = at + timedelta(seconds=45)
    renewed = judge(node(heartbeat=at), again.health, lease(renewed_at), renewed_at)
    assert renewed.health.probe_timestamp == renewed_at
    assert (
        judge(
            node(heartbeat=at), renewed.health, lease(renewed_at), renewed_at + timedelta(seconds=GRACE)
        ).new_status
        is None
    )
    # The same renewTime seen again is no renewal.
    stale = judge(
        node(heartbeat=at), renewed.health, lease(renewed_at), renewed_at + timedelta(seconds=GRACE + 1)
    )
    assert stale.new_status is not None


def test_already_unknown_needs_no_write():
    unknown = node(ready="Unknown")
    first = judge(unknown, None, None, T0)
    verdict = judge(unknown, first.health, None, T0 + timedelta(seconds=GRACE + 5))
    assert verdict.new_status is None  # Ready did not change (MemoryPressure alone is not written)


def test_a_node_that_never_posted_gets_the_startup_grace_from_its_creation():
    created = T0
    bare = {"metadata": {"name": "n1", "uid": "u1", "creationTimestamp": ts(created)}}
    early = judge(bare, None, None, created + timedelta(seconds=STARTUP))
    assert early.new_status is None and early.current_ready is None
    assert early.observed_ready == {
        "type": "Ready",
        "status": "Unknown",
        "lastHeartbeatTime": ts(created),
        "lastTransitionTime": ts(created),
    }
    assert early.grace == STARTUP
    at = created + timedelta(seconds=STARTUP + 1)
    verdict = judge(bare, early.health, None, at)
    conditions = verdict.new_status["conditions"]
    assert [c["type"] for c in conditions] == ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
    for cond in conditions:
        assert (
            cond["status"],
            cond["reason"],
            cond["message"],
            cond["lastHeartbeatTime"],
            cond["lastTransitionTime"],
        ) == ("Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.", ts(created), ts(at))


def test_a_lease_keeps_a_node_that_never_posted_status_alive():
    bare = {"metadata": {"name": "n1", "uid": "u1", "creationTimestamp": ts(T0)}}
    at = T0 + timedelta(seconds=STARTUP + 30)
    verdict = judge(bare, None, lease(at), at)
    assert verdict.new_status is None and verdict.health.probe_timestamp == at


def test_no_schedule_taints_follow_the_conditions():
    n = node(
        ready="Unknown",
        extra=[{"type": "DiskPressure", "status": "True"}, {"type": "NetworkUnavailable", "status": "True"}],
    )
    n["spec"] = {"unschedulable": True}
    assert tu.condition_taints(n) == [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ]
    assert tu.condition_taints(node(ready="False")) == [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    ]
    assert tu.condition_taints(node(ready="True")) == []


def test_only_owned_no_schedule_taints_are_diffed():
    n = node(ready="True")
    n["spec"] = {
        "taints": [
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "x"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},  # the NoExecute pass owns it
            {"key": "example.com/mine", "effect": "NoSchedule"},  # the admin's
        ]
    }
    add, drop = tu.difference(tu.condition_taints(n), tu.owned_no_schedule_taints(n))
    assert add == [] and drop == [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "x"}
    ]


def test_add_or_update_replaces_the_same_key_and_effect():
    old = [{"key": "a", "effect": "NoExecute", "timeAdded": "t1"}, {"key": "a", "effect": "NoSchedule"}]
    same, changed = tu.add_or_update(old, {"key": "a", "effect": "NoExecute", "timeAdded": "t1"})
    assert not changed and same == old
    new, changed = tu.add_or_update(old, {"key": "a", "effect": "NoExecute", "timeAdded": "t2"})
    assert changed and new == [
        {"key": "a", "effect": "NoExecute", "timeAdded": "t2"},
        {"key": "a", "effect": "NoSchedule"},
    ]
    gone, changed = tu.remove(new, {"key": "a", "effect": "NoSchedule", "value": "ignored"})
    assert changed and gone == [{"key": "a", "effect": "NoExecute", "timeAdded": "t2"}]


@pytest.mark.parametrize(
    "statuses, state",
    [
        ([], "Normal"),
        (["True"], "Normal"),
        (["Unknown"], "FullDisruption"),
        ([None, "False"], "FullDisruption"),
        (["True", "Unknown"], "Normal"),
        (["True", "Unknown", "Unknown"], "Normal"),  # needs more than 2 not ready
        (["True", "Unknown", "Unknown", "False"], "PartialDisruption"),  # 3/4 >= 0.55
        (["True", "True", "Unknown", "Unknown", "False"], "PartialDisruption"),  # 3/5 = 0.6
        (["True", "True", "True", "Unknown", "Unknown", "False"], "Normal"),  # 3/6 = 0.5
    ],
)
def test_zone_state(statuses, state):
    conditions = [None if s is None else {"type": "Ready", "status": s} for s in statuses]
    unhealthy, got = nh.zone_state(conditions, 0.55)
    assert got == state
    assert unhealthy == sum(1 for s in statuses if s != "True")


def test_zone_key_and_reduced_rate():
    assert nh.zone_key({"metadata": {}}) == ""
    labelled = {
        "metadata": {"labels": {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "z"}}
    }
    assert nh.zone_key(labelled) == "r:\x00:z"
    beta = {"metadata": {"labels": {"failure-domain.beta.kubernetes.io/zone": "z"}}}
    assert nh.zone_key(beta) == ":\x00:z"
    assert nh.reduced_qps(50, 50, 0.01) == 0.0 and nh.reduced_qps(51, 50, 0.01) == 0.01


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_eviction_queue_taints_at_the_primary_rate_with_burst_one():
    clock = Clock()
    queue = EvictionQueue(0.1, clock)
    assert queue.add("a", "ua") and queue.add("b", "ub")
    assert not queue.add("a", "ua")
    done: list[str] = []

    async def taint(item):
        done.append(item.value)
        return True, 0.0

    await queue.try_each(taint)
    assert done == ["a"]  # the burst of 1
    clock.now += 9.9
    await queue.try_each(taint)
    assert done == ["a"]
    clock.now += 0.2
    await queue.try_each(taint)
    assert done == ["a", "b"]
    # Tainted nodes stay known: never queued twice until removed.
    assert not queue.add("a", "ua")
    assert queue.remove("a") and queue.add("a", "ua")


async def test_eviction_queue_retries_later_and_rate_zero_stops_everything():
    clock = Clock()
    queue = EvictionQueue(10.0, clock)
    queue.add("a", "ua")
    tries: list[float] = []

    async def flaky(item):
        tries.append(clock.now)
        return len(tries) > 1, 0.05

    await queue.try_each(flaky)
    assert len(tries) == 1 and len(queue) == 1
    clock.now += 0.06  # due again, but the bucket (10/s, burst 1) has no token yet: upstream checks it first
    await queue.try_each(flaky)
    assert len(tries) == 1
    clock.now += 0.05
    await queue.try_each(flaky)
    assert len(tries) == 2 and len(queue) == 0
    queue.add("b", "ub")
    queue.swap_limiter(0)
    clock.now += 100
    await queue.try_each(flaky)
    assert len(tries) == 2
    queue.swap_limiter(10.0)
    await queue.try_each(flaky)
    assert len(tries) == 2  # switched while the old bucket refused: the new one starts empty
    clock.now += 0.2
    await queue.try_each(flaky)
    assert len(tries) == 3
