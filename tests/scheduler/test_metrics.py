"""The scheduler's metrics without a server: upstream's names, labels and buckets, the attempts label
capped at "15+", and the gauges read from the live scheduler only while there is one (it leads)."""

from __future__ import annotations

import random
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from controlplane.scheduler.algorithm import schedule
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.cyclemetrics import CycleMetrics
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.metrics import LiveState, SchedulerMetrics, attempts_label, exponential_buckets
from controlplane.scheduler.plugins import build_scores
from tests.scheduler.helpers import make_node, make_pod


def families(metrics: SchedulerMetrics) -> dict:  # type: ignore[type-arg]
    return {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}


def test_attempts_and_the_sli_are_counted_by_result_and_profile() -> None:
    m = SchedulerMetrics()
    m.attempt("unschedulable", "default-scheduler", 0.002)
    m.scheduled("default-scheduler", 0.004, attempts=2, since_first_attempt=1.5)
    got = families(m)
    attempts = {
        (s.labels["result"], s.labels["profile"]): s.value for s in got["scheduler_schedule_attempts"].samples
    }
    assert attempts == {("unschedulable", "default-scheduler"): 1, ("scheduled", "default-scheduler"): 1}
    sli = [
        s for s in got["scheduler_pod_scheduling_sli_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert [(s.labels, s.value) for s in sli] == [({"attempts": "2"}, 1)]
    buckets = [
        s.labels["le"]
        for s in got["scheduler_scheduling_attempt_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["result"] == "scheduled"
    ]
    assert (
        len(buckets) == 16 and buckets[0] == "0.001" and buckets[-1] == "+Inf"
    )  # ExponentialBuckets(0.001, 2, 15)
    assert not any(s.name.endswith("_created") for f in got.values() for s in f.samples)


def test_gauges_come_from_the_scheduler_that_runs_now() -> None:
    m = SchedulerMetrics()
    assert "scheduler_pending_pods" not in families(m)  # not leading: no queue to report
    m.live = lambda: LiveState(
        {"active": 2, "unschedulable": 1}, {"nodes": 3, "pods": 5, "assumed_pods": 1}, 4
    )
    got = families(m)
    pending = {s.labels["queue"]: s.value for s in got["scheduler_pending_pods"].samples}
    assert pending == {"active": 2, "backoff": 0, "unschedulable": 1, "gated": 0}
    cache = {s.labels["type"]: s.value for s in got["scheduler_scheduler_cache_size"].samples}
    assert cache == {"nodes": 3, "pods": 5, "assumed_pods": 1}
    assert [s.value for s in got["scheduler_goroutines"].samples] == [4]


def test_attempts_label_and_buckets() -> None:
    assert [attempts_label(n) for n in (1, 14, 15, 40)] == ["1", "14", "15+", "15+"]
    assert exponential_buckets(1, 2, 5) == (1, 2, 4, 8, 16)


def _counts(metrics: SchedulerMetrics, family: str, *labels: str) -> dict:  # type: ignore[type-arg]
    return {
        tuple(s.labels[k] for k in labels): s.value
        for s in families(metrics).get(family, _EMPTY).samples
        if s.name.endswith("_count")
    }


class _Empty:
    samples: list = []  # type: ignore[type-arg]


_EMPTY = _Empty()


def _decide(sampled: bool) -> SchedulerMetrics:
    """One decision over three nodes: one too small (Unschedulable: eviction could help), one tainted
    (UnschedulableAndUnresolvable), one that fits, plus a second that fits so scoring runs."""
    nodes = [
        make_node("small", cpu="100m"),
        make_node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}]),
        make_node("fits"),
        make_node("fits-too"),
    ]
    m = SchedulerMetrics()
    observer = CycleMetrics(m, "p", sampled)
    view = ClusterView(len(nodes), Counter(), nodes, {})
    scores = build_scores(SchedulerConfig())
    schedule(make_pod(cpu="1"), nodes, default_filters(), scores, view, random.Random(1), None, observer)
    return m


def test_a_sampled_cycle_reports_each_plugin_with_upstreams_status_codes() -> None:
    m = _decide(sampled=True)
    plugins = _counts(m, "scheduler_plugin_execution_duration_seconds", "plugin", "extension_point", "status")
    assert plugins[("NodeResourcesFit", "Filter", "Unschedulable")] == 1
    assert plugins[("TaintToleration", "Filter", "UnschedulableAndUnresolvable")] == 1
    assert plugins[("NodeResourcesFit", "Filter", "Success")] == 2  # "tainted" stops at TaintToleration
    assert plugins[("NodePorts", "PreFilter", "Skip")] == 1  # no host ports: upstream's Skip
    assert plugins[("NodeResourcesBalancedAllocation", "Score", "Success")] == 1
    assert ("NodeResourcesFit", "PreScore", "Success") in plugins
    # Upstream's NodeUnschedulable, NodeName and TaintToleration have no PreFilter to time.
    assert not {p for p, point, _ in plugins if point == "PreFilter"} & {"NodeName", "TaintToleration"}
    points = _counts(
        m, "scheduler_framework_extension_point_duration_seconds", "extension_point", "status", "profile"
    )
    assert points == {
        ("PreFilter", "Success", "p"): 1,
        ("PreScore", "Success", "p"): 1,
        ("Score", "Success", "p"): 1,
    }


def test_an_unsampled_cycle_reports_only_extension_points() -> None:
    m = _decide(sampled=False)
    assert _counts(m, "scheduler_plugin_execution_duration_seconds", "plugin") == {}
    assert len(_counts(m, "scheduler_framework_extension_point_duration_seconds", "extension_point")) == 3
    buckets = [
        s.labels["le"]
        for s in families(m)["scheduler_framework_extension_point_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["extension_point"] == "Score"
    ]
    assert len(buckets) == 13 and buckets[0] == "0.0001"  # ExponentialBuckets(0.0001, 2, 12) and +Inf
