"""The scheduler's metrics under upstream's names, help texts, labels and buckets
(pkg/scheduler/metrics/metrics.go), served on the secure port's /metrics: the ones this scheduler can
compute honestly. Counted while it leads (one registry per process, kept across leadership terms);
the queue, cache and binding gauges are read at scrape time from the scheduler that runs now.

Extension point durations are observed every cycle, plugin durations in one cycle of ten (upstream
samples 10% at random; every tenth here, so the first cycle always is). Left out, because nothing here
would feed them: permit waits, queue incoming events and unschedulable reasons by plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controlplane.scheduler.batchhistogram import BatchHistogram
from kubeclient.exposition import render

SCHEDULED, UNSCHEDULABLE, ERROR = "scheduled", "unschedulable", "error"
PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated")


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """metrics.ExponentialBuckets."""
    return tuple(start * factor**i for i in range(count))


def attempts_label(attempts: int) -> str:
    """upstream's getAttemptsLabel: the count, or "15+" from 15 on."""
    return str(attempts) if attempts < 15 else "15+"


@dataclass(frozen=True)
class LiveState:
    """What the gauges read at scrape time."""

    pending: dict[str, int]  # queue -> pods
    cache: dict[str, int]  # nodes, pods, assumed_pods
    binding: int  # bindings in flight


class _Gauges(Collector):
    def __init__(self, state: Callable[[], LiveState | None]) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        state = self.state()
        if state is None:
            return  # not leading: no queue, no cache
        pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "[STABLE] Number of pending pods, by the queue type. 'active' means number of pods in activeQ; "
            "'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in "
            "unschedulablePods that the scheduler attempted to schedule and failed; 'gated' is the number "
            "of unschedulable pods that the scheduler never attempted to schedule because they are gated.",
            labels=["queue"],
        )
        for queue in PENDING_QUEUES:
            pending.add_metric([queue], state.pending.get(queue, 0))
        cache = GaugeMetricFamily(
            "scheduler_scheduler_cache_size",
            "[ALPHA] Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            labels=["type"],
        )
        for kind in ("assumed_pods", "nodes", "pods"):
            cache.add_metric([kind], state.cache.get(kind, 0))
        goroutines = GaugeMetricFamily(
            "scheduler_goroutines",
            "[ALPHA] Number of running goroutines split by the work they do such as binding.",
            labels=["operation"],
        )
        goroutines.add_metric(["binding"], state.binding)
        yield from (pending, cache, goroutines)


class SchedulerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.live: Callable[[], LiveState | None] = lambda: None
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "[STABLE] Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could "
            "not be scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "[STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "[ALPHA] Scheduling algorithm latency in seconds",
            buckets=exponential_buckets(0.001, 2, 15),
            registry=r,
        )
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "[BETA] E2e latency for a pod being scheduled, from the time the pod enters the scheduling "
            "queue an d might involve multiple scheduling attempts.",  # sic, upstream's text
            ["attempts"],
            buckets=exponential_buckets(0.01, 2, 20),
            registry=r,
        )
        self.pod_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "[STABLE] Number of attempts to successfully schedule a pod.",
            buckets=exponential_buckets(1, 2, 5),
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "[STABLE] Total preemption attempts in the cluster till now",
            registry=r,
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "[STABLE] Number of selected preemption victims",
            buckets=exponential_buckets(1, 2, 7),
            registry=r,
        )
        self.point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "[STABLE] Latency for running all plugins of a specific extension point.",
            ["extension_point", "status", "profile"],
            buckets=exponential_buckets(0.0001, 2, 12),
            registry=r,
        )
        # A sampled cycle observes every filter on every node: taken a batch per series at a time.
        self.plugin_duration = BatchHistogram(
            "scheduler_plugin_execution_duration_seconds",
            "[ALPHA] Duration for running a plugin at a specific extension point.",
            ("plugin", "extension_point", "status"),
            exponential_buckets(0.00001, 1.5, 20),
        )
        r.register(self.plugin_duration)
        r.register(_Gauges(lambda: self.live()))
        self._point_series: dict[tuple[str, str, str], Histogram] = {}

    def point(self, point: str, status: str, profile: str, seconds: float) -> None:
        """One extension point's run; its series looked up once (several points every cycle)."""
        key = (point, status, profile)
        series = self._point_series.get(key)
        if series is None:
            series = self._point_series[key] = self.point_duration.labels(point, status, profile)
        series.observe(seconds)

    def plugin(self, name: str, point: str, status: str, seconds: float) -> None:
        self.plugin_duration.observe((name, point, status), seconds)

    def plugin_many(self, name: str, point: str, status: str, seconds: Sequence[float]) -> None:
        """Several calls of one plugin at one point with one status (a sampled cycle's Filter calls)."""
        self.plugin_duration.observe_many((name, point, status), seconds)

    def preemption(self, victims: int | None) -> None:
        """One PostFilter run; `victims` when it chose a node."""
        self.preemption_attempts.inc()
        if victims is not None:
            self.preemption_victims.observe(victims)

    def attempt(self, result: str, profile: str, seconds: float) -> None:
        self.attempts.labels(result, profile).inc()
        self.attempt_duration.labels(result, profile).observe(seconds)

    def scheduled(self, profile: str, seconds: float, attempts: int, since_first_attempt: float) -> None:
        """A pod bound: its last attempt, and the end-to-end figures over all of its attempts."""
        self.attempt(SCHEDULED, profile, seconds)
        self.sli_duration.labels(attempts_label(attempts)).observe(since_first_attempt)
        self.pod_attempts.observe(attempts)

    def exposition(self) -> bytes:
        return render([self.registry])
