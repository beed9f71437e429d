"""The HPA's pure parts: the replica calculation on upstream's documented cases
(pkg/controller/podautoscaler/replica_calculator_test.go's figures), the stabilization windows and the
scaling policies (horizontal.go's rules, the behavior examples of the HPA docs), the conditions, the
printer's TARGETS and the kind's defaults and validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controlplane.apiserver.kinds.hpa import KIND as HPA
from controlplane.apiserver.kinds.hpa import format_metrics
from controlplane.apiserver.kinds.hpav1 import KIND as HPA_V1
from controlplane.controllers.podautoscaler.behavior import Normalizer
from controlplane.controllers.podautoscaler.metrics import pod_metrics
from controlplane.controllers.podautoscaler.replicas import (
    PodMetric,
    ReplicaError,
    raw_resource_replicas,
    resource_replicas,
)
from controlplane.controllers.podautoscaler.status import set_condition

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
COOL = NOW - timedelta(minutes=10)  # started long before: outside the CPU initialization period
HOT = NOW - timedelta(seconds=10)  # within it, and its sample predates a full window since it became Ready


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pods(
    requests: list[str],
    ready: list[str] | None = None,
    phases: list[str] | None = None,
    starts: list[datetime] | None = None,
    deleting: list[bool] | None = None,
    resource: str = "cpu",
) -> list[dict[str, Any]]:
    out = []
    for i, request in enumerate(requests):
        start = (starts or [COOL] * len(requests))[i]
        meta: dict[str, Any] = {"name": f"p{i}"}
        if deleting and deleting[i]:
            meta["deletionTimestamp"] = _ts(NOW)
        out.append(
            {
                "metadata": meta,
                "spec": {"containers": [{"name": "c", "resources": {"requests": {resource: request}}}]},
                "status": {
                    "phase": (phases or ["Running"] * len(requests))[i],
                    "startTime": _ts(start),
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": (ready or ["True"] * len(requests))[i],
                            "lastTransitionTime": _ts(start),
                        }
                    ],
                },
            }
        )
    return out


def levels(values: list[int], when: datetime = NOW) -> dict[str, PodMetric]:
    return {f"p{i}": PodMetric(v, when, 30.0) for i, v in enumerate(values)}


# (current, requests, levels, target %, expected replicas, expected utilization, readiness, phases, starts, deleting)
UPSTREAM_CASES = {
    "ScaleUp": (3, ["1"] * 3, [300, 500, 700], 30, 5, 50, None, None, None, None),
    "ScaleUpUnreadyLessScale": (
        3,
        ["1"] * 3,
        [300, 500, 700],
        30,
        4,
        60,
        ["False", "True", "True"],
        None,
        [HOT, COOL, COOL],
        None,
    ),
    "ScaleUpHotCpuLessScale": (3, ["1"] * 3, [300, 500, 700], 30, 4, 60, None, None, [HOT, COOL, COOL], None),
    "ScaleUpUnreadyNoScale": (
        3,
        ["1"] * 3,
        [400, 500, 700],
        30,
        3,
        40,
        ["True", "False", "False"],
        None,
        [COOL, HOT, HOT],
        None,
    ),
    "ScaleDown": (5, ["1"] * 5, [100, 300, 500, 250, 250], 50, 3, 28, None, None, None, None),
    "ScaleDownIgnoresFailedPods": (
        5,
        ["1"] * 7,
        [100, 300, 500, 250, 250],
        50,
        3,
        28,
        ["True"] * 5 + ["False"] * 2,
        ["Running"] * 5 + ["Failed"] * 2,
        None,
        None,
    ),
    "ScaleDownIgnoresDeletionPods": (
        5,
        ["1"] * 7,
        [100, 300, 500, 250, 250],
        50,
        3,
        28,
        ["True"] * 5 + ["False"] * 2,
        None,
        None,
        [False] * 5 + [True] * 2,
    ),
    "Tolerance": (3, ["900m", "1", "1100m"], [1010, 1030, 1020], 100, 3, 102, None, None, None, None),
    "SuperfluousMetrics": (
        4,
        ["1"] * 4,
        [4000, 9500, 3000, 7000, 3200, 2000],
        100,
        24,
        587,
        None,
        None,
        None,
        None,
    ),
    "MissingMetrics": (4, ["1"] * 4, [400, 95], 100, 3, 24, None, None, None, None),
    "MissingMetricsNoChangeEq": (2, ["1"] * 2, [1000], 100, 2, 100, None, None, None, None),
    "MissingMetricsNoChangeGt": (2, ["1"] * 2, [1900], 100, 2, 190, None, None, None, None),
    "MissingMetricsNoChangeLt": (2, ["1"] * 2, [600], 100, 2, 60, None, None, None, None),
    "MissingMetricsUnreadyChange": (
        3,
        ["1"] * 3,
        [100, 450],
        50,
        3,
        45,
        ["False", "True", "True"],
        None,
        None,
        None,
    ),
    "MissingMetricsHotCpuNoChange": (
        3,
        ["1"] * 3,
        [100, 450],
        50,
        3,
        45,
        None,
        None,
        [HOT, COOL, COOL],
        None,
    ),
    "MissingMetricsUnreadyScaleUp": (
        3,
        ["1"] * 3,
        [100, 2000],
        50,
        4,
        200,
        ["False", "True", "True"],
        None,
        None,
        None,
    ),
    "MissingMetricsHotCpuScaleUp": (
        3,
        ["1"] * 3,
        [100, 2000],
        50,
        4,
        200,
        ["False", "True", "True"],
        None,
        [HOT, COOL, COOL],
        None,
    ),
    "MissingMetricsUnreadyScaleDown": (
        4,
        ["1"] * 4,
        [100, 100, 100],
        50,
        3,
        10,
        ["False", "True", "True", "True"],
        None,
        None,
        None,
    ),
    "DuringRollingUpdateWithMaxSurge": (2, ["1"] * 3, [100, 100], 50, 2, 10, None, None, None, None),
}


@pytest.mark.parametrize("case", sorted(UPSTREAM_CASES))
def test_replica_calculation_matches_upstream(case: str) -> None:
    current, requests, values, target, replicas, utilization, ready, phases, starts, deleting = (
        UPSTREAM_CASES[case]
    )
    result = resource_replicas(
        current, target, "cpu", pods(requests, ready, phases, starts, deleting), levels(values), NOW
    )
    assert (result.replicas, result.utilization) == (replicas, utilization)


def test_computed_tolerance_regression() -> None:
    """TestReplicaCalcComputedToleranceAlgImplementation: 10 pods using half their request; a target just
    past the tolerance scales down, one within it does not."""
    requests = [f"{300 + d}m" for d in (100, -100, 10, -10, 2, -2, 1, -1, 0, 0)]
    target = int((1 / (2 * (1 - 0.1)) + 0.01) * 100)  # 56
    assert resource_replicas(10, target, "cpu", pods(requests), levels([150] * 10), NOW).replicas == 9
    target = int((1 / (2 * (1 - 0.1)) + 0.004) * 100)  # 55
    assert resource_replicas(10, target, "cpu", pods(requests), levels([150] * 10), NOW).replicas == 10


def test_errors_as_upstream_words_them() -> None:
    with pytest.raises(ReplicaError, match="missing request for cpu in container c of Pod p0"):
        resource_replicas(
            1, 100, "cpu", [{**pods(["1"])[0], "spec": {"containers": [{"name": "c"}]}}], levels([200]), NOW
        )
    with pytest.raises(ReplicaError, match="no pods returned by selector while calculating replica count"):
        resource_replicas(1, 100, "cpu", [], levels([200]), NOW)
    with pytest.raises(
        ReplicaError, match=r"did not receive metrics for targeted pods \(pods might be unready\)"
    ):
        resource_replicas(
            2, 100, "cpu", pods(["1", "1"], phases=["Pending", "Pending"]), levels([200, 200]), NOW
        )


def test_memory_readiness_does_not_matter() -> None:
    """Only CPU samples of unready pods are set aside (memory: all count)."""
    result = resource_replicas(
        3,
        50,
        "memory",
        pods(["1Gi"] * 3, ["False", "True", "True"], resource="memory"),
        levels([1073741824000] * 3),
        NOW,
    )
    assert (result.replicas, result.utilization) == (6, 100)


def test_average_value_targets() -> None:
    """GetRawResourceReplicas: the average per pod against the target; missing pods at the target on the
    way down, at zero on the way up."""
    assert (
        raw_resource_replicas(3, 500, "cpu", pods(["1"] * 3), levels([1000, 1000, 1000]), NOW).replicas == 6
    )
    assert raw_resource_replicas(3, 500, "cpu", pods(["1"] * 3), levels([520, 480, 500]), NOW).replicas == 3
    down = raw_resource_replicas(4, 500, "cpu", pods(["1"] * 4), levels([100, 100]), NOW)
    assert (down.replicas, down.raw_average) == (3, 100)  # (100+100+500+500)/4/500 = 0.6 -> ceil(2.4)


def test_pod_metrics_sum_containers_and_skip_incomplete_pods() -> None:
    items = [
        {
            "metadata": {"name": "a"},
            "timestamp": "2026-01-01T12:00:00Z",
            "window": "15.5s",
            "containers": [
                {"name": "x", "usage": {"cpu": "100m", "memory": "1Ki"}},
                {"name": "y", "usage": {"cpu": "250000000n"}},
            ],
        },
        {
            "metadata": {"name": "b"},
            "timestamp": "2026-01-01T12:00:00Z",
            "window": "15s",
            "containers": [{"name": "x", "usage": {"memory": "1Ki"}}],
        },
    ]
    cpu = pod_metrics(items, "cpu")
    assert set(cpu) == {"a"} and cpu["a"].value == 350 and cpu["a"].window == 15.5
    assert pod_metrics(items, "cpu", container="y")["a"].value == 250
    memory = pod_metrics(items, "memory")  # a's container y reports no memory: a is missing
    assert set(memory) == {"b"} and memory["b"].value == 1024_000  # milli-bytes, as upstream's MilliValue


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_scale_down_is_stabilized_for_the_window() -> None:
    clock = Clock()
    n = Normalizer(clock, downscale_stabilization=300)
    n.record_initial("k", 5)
    d = n.normalize("k", 5, 2, 1, 10)
    assert (d.replicas, d.able_reason) == (5, "ScaleDownStabilized")
    clock.t += 301  # the old recommendations left the window
    n.normalize("k", 5, 2, 1, 10)
    clock.t += 1
    d = n.normalize("k", 5, 2, 1, 10)
    assert (d.replicas, d.able_reason, d.limited) == (2, "ReadyForNewScale", False)


def test_without_behavior_scale_up_is_at_most_double_or_four() -> None:
    n = Normalizer(Clock())
    d = n.normalize("k", 1, 10, 1, 20)
    assert (d.replicas, d.limited, d.limited_reason) == (4, True, "ScaleUpLimit")
    d = n.normalize("k", 3, 10, 1, 5)
    assert (d.replicas, d.limited_reason) == (5, "TooManyReplicas")
    d = n.normalize("other", 3, 0, 2, 5)
    assert (d.replicas, d.limited, d.limited_reason, d.able_reason) == (
        2,
        True,
        "TooFewReplicas",
        "ReadyForNewScale",
    )


DEFAULT_UP = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ],
}


def test_behavior_scale_up_policies_select_max_and_count_recent_events() -> None:
    clock = Clock()
    n = Normalizer(clock)
    behavior = {
        "scaleUp": DEFAULT_UP,
        "scaleDown": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
        },
    }
    d = n.normalize_with_behavior("k", behavior, 2, 20, 1, 100)
    assert (d.replicas, d.limited_reason) == (6, "ScaleUpLimit")  # max(2+4, 2*2)
    n.store_scale_event("k", behavior, 2, 6)
    clock.t += 5  # within the 15 s period: the period started at 2
    d = n.normalize_with_behavior("k", behavior, 6, 20, 1, 100)
    assert d.replicas == 6 and d.limited_reason == "ScaleUpLimit"
    clock.t += 15
    d = n.normalize_with_behavior("k", behavior, 6, 20, 1, 100)
    assert d.replicas == 12  # max(6+4, 6*2)


def test_behavior_select_min_and_disabled() -> None:
    n = Normalizer(Clock())
    up_min = {**DEFAULT_UP, "selectPolicy": "Min"}
    d = n.normalize_with_behavior("a", {"scaleUp": up_min, "scaleDown": {}}, 10, 100, 1, 100)
    assert d.replicas == 14  # min(10+4, 20)
    d = n.normalize_with_behavior(
        "b", {"scaleUp": {**DEFAULT_UP, "selectPolicy": "Disabled"}, "scaleDown": {}}, 10, 100, 1, 100
    )
    assert d.replicas == 10 and d.limited_reason == "ScaleUpLimit"


def test_behavior_scale_down_window_and_percent_policy() -> None:
    clock = Clock()
    n = Normalizer(clock)
    behavior = {
        "scaleUp": DEFAULT_UP,
        "scaleDown": {
            "stabilizationWindowSeconds": 60,
            "selectPolicy": "Max",
            "policies": [{"type": "Percent", "value": 50, "periodSeconds": 60}],
        },
    }
    n.record_initial("k", 10)
    d = n.normalize_with_behavior("k", behavior, 10, 1, 1, 20)
    assert (d.replicas, d.able_reason) == (10, "ScaleDownStabilized")
    clock.t += 61
    n.normalize_with_behavior("k", behavior, 10, 1, 1, 20)  # replaces the initial sample
    clock.t += 61
    d = n.normalize_with_behavior("k", behavior, 10, 1, 1, 20)
    assert (d.replicas, d.limited, d.limited_reason) == (5, True, "ScaleDownLimit")  # at most half per minute


def test_scale_down_window_defaults_to_the_controllers() -> None:
    n = Normalizer(Clock(), downscale_stabilization=300)
    n.record_initial("k", 4)
    d = n.normalize_with_behavior(
        "k",
        {
            "scaleUp": DEFAULT_UP,
            "scaleDown": {
                "selectPolicy": "Max",
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            },
        },
        4,
        1,
        1,
        10,
    )
    assert d.replicas == 4 and d.able_reason == "ScaleDownStabilized"


def test_conditions_keep_their_transition_time_unless_the_status_changes() -> None:
    conditions: list[dict[str, Any]] = []
    set_condition(conditions, "AbleToScale", "True", "SucceededGetScale", "m", "t1")
    set_condition(conditions, "AbleToScale", "True", "ReadyForNewScale", "m2", "t2")
    assert conditions[0]["lastTransitionTime"] == "t1" and conditions[0]["reason"] == "ReadyForNewScale"
    set_condition(conditions, "AbleToScale", "False", "FailedGetScale", "m3", "t3")
    assert conditions[0]["lastTransitionTime"] == "t3"


def test_targets_column() -> None:
    cpu = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
    }
    mem = {
        "type": "Resource",
        "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}},
    }
    assert format_metrics([cpu], []) == "cpu: <unknown>/50%"
    status = [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "current": {"averageUtilization": 12, "averageValue": "12m"}},
        },
        {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "20Mi"}}},
    ]
    assert format_metrics([cpu, mem], status) == "cpu: 12%/50%, memory: 20Mi/100Mi"
    assert format_metrics([cpu, mem, cpu], status) == "cpu: 12%/50%, memory: 20Mi/100Mi + 1 more..."
    assert format_metrics([], []) == "<none>"


def test_defaults_and_validation() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "h"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "maxReplicas": 3,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 10}},
        },
    }
    HPA.default(obj, True)
    spec = obj["spec"]
    assert spec["minReplicas"] == 1
    assert spec["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
        }
    ]
    assert spec["behavior"]["scaleUp"] == DEFAULT_UP
    assert spec["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 10,
        "selectPolicy": "Max",
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    }
    assert HPA.validate(obj) == []
    bad = {
        "metadata": {"name": "h"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "web"},
            "minReplicas": 0,
            "maxReplicas": 0,
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}},
        },
    }
    texts = [f"{e.field}: {e.detail}" for e in HPA.validate(bad)]
    assert any(
        "spec.minReplicas: Invalid value: 0: must be greater than or equal to 1" in t for t in texts
    ), texts
    assert any("spec.maxReplicas: Invalid value: 0: must be greater than 0" in t for t in texts), texts
    assert any("must be less than or equal to 3600" in t for t in texts), texts


def test_v1_converts_to_the_stored_v2_and_back() -> None:
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1,
            "maxReplicas": 5,
            "targetCPUUtilizationPercentage": 50,
        },
    }
    stored = HPA_V1.to_storage(v1)
    assert stored["apiVersion"] == "autoscaling/v2"
    assert stored["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
        }
    ]
    stored["status"] = {
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "currentMetrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "current": {"averageUtilization": 70, "averageValue": "70m"}},
            }
        ],
    }
    back = HPA_V1.from_storage(stored)
    assert back["spec"]["targetCPUUtilizationPercentage"] == 50 and "metrics" not in back["spec"]
    assert back["status"] == {
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "currentCPUUtilizationPercentage": 70,
    }
    assert HPA_V1.to_storage(back)["spec"]["metrics"] == stored["spec"]["metrics"]
