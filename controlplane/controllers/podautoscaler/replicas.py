"""How many replicas the metrics ask for, as upstream's ReplicaCalculator
(pkg/controller/podautoscaler/replica_calculator.go), with no I/O: the caller hands it the pods, their
metrics (milli-units: millicores, milli-bytes) and the time.

Pods being deleted or Failed are ignored; Pending pods, and for CPU pods not yet Ready or whose sample
predates their readiness (within --horizontal-pod-autoscaler-cpu-initialization-period, 5 min), count
as unready; pods without a sample are missing. The ratio of usage to target decides; within the
tolerance (0.1) nothing changes. When some pods are missing or unready, the ratio is computed again
assuming the missing use 100% of their request (or the target, if higher) on a scale down and nothing
on a scale up, and the unready nothing on a scale up; if that flips the direction or lands within the
tolerance, the replica count stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubeclient.quantity import milli_value

Obj = dict[str, Any]
TOLERANCE = 0.1
CPU_INITIALIZATION_PERIOD = 300.0
INITIAL_READINESS_DELAY = 30.0


class ReplicaError(Exception):
    """The replica count cannot be computed (upstream's error texts)."""


@dataclass(frozen=True)
class PodMetric:
    value: int  # milli-units
    timestamp: datetime
    window: float  # seconds


@dataclass(frozen=True)
class Result:
    replicas: int
    utilization: int | None  # percent of request (Utilization targets)
    raw_average: int  # average usage per pod, milli-units


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _ready_condition(pod: Obj) -> Obj | None:
    return next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), None
    )


@dataclass
class PodGroups:
    ready_count: int
    unready: set[str]
    missing: set[str]
    ignored: set[str]


def group_pods(
    pods: list[Obj],
    metrics: dict[str, PodMetric],
    resource: str,
    now: datetime,
    cpu_initialization_period: float = CPU_INITIALIZATION_PERIOD,
    initial_readiness_delay: float = INITIAL_READINESS_DELAY,
) -> PodGroups:
    groups = PodGroups(0, set(), set(), set())
    for pod in pods:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        if pod["metadata"].get("deletionTimestamp") or phase == "Failed":
            groups.ignored.add(name)
            continue
        if phase == "Pending":
            groups.unready.add(name)
            continue
        metric = metrics.get(name)
        if metric is None:
            groups.missing.add(name)
            continue
        if resource == "cpu" and _cpu_unready(
            pod, metric, now, cpu_initialization_period, initial_readiness_delay
        ):
            groups.unready.add(name)
            continue
        groups.ready_count += 1
    return groups


def _cpu_unready(
    pod: Obj, metric: PodMetric, now: datetime, init_period: float, readiness_delay: float
) -> bool:
    condition = _ready_condition(pod)
    start = _time((pod.get("status") or {}).get("startTime"))
    if condition is None or start is None:
        return True
    transition = _time(condition.get("lastTransitionTime")) or start
    if start + timedelta(seconds=init_period) > now:
        # within the initialization period: unready, or no full window of metrics since it changed state
        return condition.get("status") == "False" or metric.timestamp < transition + timedelta(
            seconds=metric.window
        )
    # later: ignored only while unready and never ready since it started
    return condition.get("status") == "False" and start + timedelta(seconds=readiness_delay) > transition


def pod_requests(pods: list[Obj], resource: str, container: str = "") -> dict[str, int]:
    """Each pod's request for the resource (milli-units), summed over its containers (or the one named)."""
    out: dict[str, int] = {}
    for pod in pods:
        total = 0
        for c in (pod.get("spec") or {}).get("containers") or []:
            if container and c.get("name") != container:
                continue
            request = ((c.get("resources") or {}).get("requests") or {}).get(resource)
            if request is None:
                raise ReplicaError(
                    f"missing request for {resource} in container {c.get('name')} of Pod {pod['metadata']['name']}"
                )
            total += milli_value(request)
        out[pod["metadata"]["name"]] = total
    return out


def utilization_ratio(
    metrics: dict[str, PodMetric], requests: dict[str, int], target: int
) -> tuple[float, int, int]:
    """metricsclient.GetResourceUtilizationRatio: (usage / target ratio, utilization %, raw average)."""
    metrics_total = requests_total = entries = 0
    for name, metric in metrics.items():
        request = requests.get(name)
        if request is None:
            continue  # upstream: a metric for a pod not (any longer) selected is skipped
        requests_total += request
        metrics_total += metric.value
        entries += 1
    if requests_total == 0:
        raise ReplicaError("no metrics returned matched known pods")
    utilization = int(metrics_total * 100 / requests_total)
    return utilization / target, utilization, metrics_total // entries


def usage_ratio(metrics: dict[str, PodMetric], target: int) -> tuple[float, int]:
    """metricsclient.GetMetricUsageRatio: (average usage / target, average usage)."""
    total = sum(m.value for m in metrics.values())
    average = total // len(metrics)
    return average / target, average


def _prepare(
    pods: list[Obj], metrics: dict[str, PodMetric], resource: str, now: datetime, **periods: float
) -> tuple[dict[str, PodMetric], PodGroups]:
    if not pods:
        raise ReplicaError("no pods returned by selector while calculating replica count")
    groups = group_pods(pods, metrics, resource, now, **periods)
    kept = {n: m for n, m in metrics.items() if n not in groups.ignored and n not in groups.unready}
    if not kept:
        raise ReplicaError("did not receive metrics for targeted pods (pods might be unready)")
    return kept, groups


def resource_replicas(
    current: int,
    target_utilization: int,
    resource: str,
    pods: list[Obj],
    metrics: dict[str, PodMetric],
    now: datetime,
    container: str = "",
    tolerance: float = TOLERANCE,
    **periods: float,
) -> Result:
    """GetResourceReplicas: a Utilization target (percent of the pods' requests)."""
    kept, groups = _prepare(pods, metrics, resource, now, **periods)
    requests = pod_requests(pods, resource, container)
    ratio, utilization, raw = utilization_ratio(kept, requests, target_utilization)
    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if abs(1.0 - ratio) <= tolerance:
            return Result(current, utilization, raw)
        return Result(math.ceil(ratio * groups.ready_count), utilization, raw)
    filled = dict(kept)
    placeholder = next(iter(kept.values()))
    if groups.missing:
        if ratio < 1.0:
            fallback = max(100, target_utilization)
            for name in groups.missing:
                filled[name] = PodMetric(
                    requests[name] * fallback // 100, placeholder.timestamp, placeholder.window
                )
        elif ratio > 1.0:
            for name in groups.missing:
                filled[name] = PodMetric(0, placeholder.timestamp, placeholder.window)
    if scale_up_with_unready:
        for name in groups.unready:
            filled[name] = PodMetric(0, placeholder.timestamp, placeholder.window)
    new_ratio, _, _ = utilization_ratio(filled, requests, target_utilization)
    return Result(_settle(current, ratio, new_ratio, len(filled), tolerance), utilization, raw)


def raw_resource_replicas(
    current: int,
    target_average: int,
    resource: str,
    pods: list[Obj],
    metrics: dict[str, PodMetric],
    now: datetime,
    tolerance: float = TOLERANCE,
    **periods: float,
) -> Result:
    """GetRawResourceReplicas: an AverageValue target (milli-units per pod), calcPlainMetricReplicas."""
    kept, groups = _prepare(pods, metrics, resource, now, **periods)
    ratio, average = usage_ratio(kept, target_average)
    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if abs(1.0 - ratio) <= tolerance:
            return Result(current, None, average)
        return Result(math.ceil(ratio * groups.ready_count), None, average)
    filled = dict(kept)
    placeholder = next(iter(kept.values()))
    if groups.missing:
        value = target_average if ratio < 1.0 else 0
        if ratio != 1.0:
            for name in groups.missing:
                filled[name] = PodMetric(value, placeholder.timestamp, placeholder.window)
    if scale_up_with_unready:
        for name in groups.unready:
            filled[name] = PodMetric(0, placeholder.timestamp, placeholder.window)
    new_ratio, _ = usage_ratio(filled, target_average)
    return Result(_settle(current, ratio, new_ratio, len(filled), tolerance), None, average)


def _settle(current: int, ratio: float, new_ratio: float, count: int, tolerance: float) -> int:
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current
    replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


def ready_pod_count(pods: list[Obj]) -> int:
    """getReadyPodsCount: Running pods whose Ready condition is True."""
    if not pods:
        raise ReplicaError("no pods returned by selector while calculating replica count")
    return sum(
        1
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and (_ready_condition(p) or {}).get("status") == "True"
    )


def usage_ratio_replicas(current: int, ratio: float, pods: list[Obj], tolerance: float = TOLERANCE) -> int:
    """getUsageRatioReplicaCount (Object and External Value targets): the ratio times the ready pods;
    from zero replicas the ratio alone."""
    if current == 0:
        return math.ceil(ratio)
    if abs(1.0 - ratio) <= tolerance:
        return current
    try:
        ready = ready_pod_count(pods)
    except ReplicaError as err:
        raise ReplicaError(f"unable to calculate ready pods: {err}") from None
    return math.ceil(ratio * ready)


def per_pod_replicas(
    status_replicas: int, usage: int, target_average: int, tolerance: float = TOLERANCE
) -> tuple[int, int]:
    """GetObjectPerPodMetricReplicas / GetExternalPerPodMetricReplicas: (replicas, usage per pod)."""
    replicas = status_replicas
    ratio = usage / (target_average * replicas) if replicas else math.inf
    if abs(1.0 - ratio) > tolerance:
        replicas = math.ceil(usage / target_average)
    return replicas, math.ceil(usage / status_replicas) if status_replicas else usage
