"""The scheduler's metrics without a server: upstream's names, labels and buckets, the attempts label
capped at "15+", and the gauges read from the live scheduler only while there is one (it leads)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from controlplane.scheduler.metrics import LiveState, SchedulerMetrics, attempts_label, exponential_buckets


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
