"""The kubelet's own metrics, served at /metrics with upstream's names, help texts, labels and buckets
(pkg/kubelet/metrics/metrics.go): what the pod workers, the PLEG-like relist and the CRI client report
through small hooks. One registry per agent (tests run several agents in one process), rendered by
kubeclient.exposition (no `_created` series, which upstream's component-base never writes)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubeclient.exposition import render

# prometheus.DefBuckets
DEF_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# podStartupDurationBuckets
POD_START_BUCKETS = (
    0.5,
    1,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    20,
    30,
    45,
    60,
    120,
    180,
    240,
    300,
    360,
    480,
    600,
    900,
    1200,
    1800,
    2700,
    3600,
)
# metrics.ExponentialBuckets(.005, 2.5, 14)
RUNTIME_BUCKETS = tuple(0.005 * 2.5**i for i in range(14))
# The container states upstream's relist counts (kubecontainer.State values).
CONTAINER_STATES = ("created", "running", "exited", "unknown")


def _alpha(text: str) -> str:
    return f"[ALPHA] {text}"


class KubeletMetrics:
    def __init__(self, node_name: str = "") -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.node_name = Gauge(
            "kubelet_node_name", _alpha("The node's name. The count is always 1."), ["node"], registry=r
        )
        if node_name:
            self.node_name.labels(node=node_name).set(1)
        self.running_pods = Gauge(
            "kubelet_running_pods", _alpha("Number of pods that have a running pod sandbox"), registry=r
        )
        self.running_containers = Gauge(
            "kubelet_running_containers",
            _alpha("Number of containers currently running"),
            ["container_state"],
            registry=r,
        )
        self.pod_start_duration = Histogram(
            "kubelet_pod_start_duration_seconds",
            _alpha(
                "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run"
            ),
            buckets=POD_START_BUCKETS,
            registry=r,
        )
        self.pod_worker_duration = Histogram(
            "kubelet_pod_worker_duration_seconds",
            _alpha(
                "Duration in seconds to sync a single pod. Broken down by operation type: create, update, or sync"
            ),
            ["operation_type"],
            buckets=DEF_BUCKETS,
            registry=r,
        )
        self.pleg_relist_duration = Histogram(
            "kubelet_pleg_relist_duration_seconds",
            _alpha("Duration in seconds for relisting pods in PLEG."),
            buckets=DEF_BUCKETS,
            registry=r,
        )
        self.pleg_relist_interval = Histogram(
            "kubelet_pleg_relist_interval_seconds",
            _alpha("Interval in seconds between relisting in PLEG."),
            buckets=DEF_BUCKETS,
            registry=r,
        )
        self.pleg_last_seen = Gauge(
            "kubelet_pleg_last_seen_seconds",
            _alpha("Timestamp in seconds when PLEG was last seen active."),
            registry=r,
        )
        self.runtime_operations = Counter(
            "kubelet_runtime_operations_total",
            _alpha("Cumulative number of runtime operations by operation type."),
            ["operation_type"],
            registry=r,
        )
        self.runtime_operations_duration = Histogram(
            "kubelet_runtime_operations_duration_seconds",
            _alpha("Duration in seconds of runtime operations. Broken down by operation type."),
            ["operation_type"],
            buckets=RUNTIME_BUCKETS,
            registry=r,
        )
        self.runtime_operations_errors = Counter(
            "kubelet_runtime_operations_errors_total",
            _alpha("Cumulative number of runtime operation errors by operation type."),
            ["operation_type"],
            registry=r,
        )
        # Counted by upstream's eviction manager for threshold (node pressure) evictions only; this agent
        # has no such manager, and upstream's emptyDir sizeLimit eviction does not count here either.
        self.evictions = Counter(
            "kubelet_evictions",
            _alpha("Cumulative number of pod evictions by eviction signal"),
            ["eviction_signal"],
            registry=r,
        )
        self._last_relist: float | None = None

    # -- hooks ---------------------------------------------------------------------------------------

    def runtime_operation(self, operation: str, seconds: float, failed: bool) -> None:
        """The CRI client's observer: one call of `operation` took `seconds`."""
        self.runtime_operations.labels(operation_type=operation).inc()
        self.runtime_operations_duration.labels(operation_type=operation).observe(seconds)
        if failed:
            self.runtime_operations_errors.labels(operation_type=operation).inc()

    def relisted(self, started: float, seconds: float, running_pods: int, containers: dict[str, int]) -> None:
        """One relist done: its duration, the interval since the previous one (upstream measures start to
        start), and the running pods and containers by state that it saw."""
        self.pleg_relist_duration.observe(seconds)
        if self._last_relist is not None:
            self.pleg_relist_interval.observe(max(started - self._last_relist, 0.0))
        self._last_relist = started
        self.pleg_last_seen.set(started + seconds)
        self.running_pods.set(running_pods)
        for state in CONTAINER_STATES:
            self.running_containers.labels(container_state=state).set(containers.get(state, 0))

    def pod_synced(self, operation: str, seconds: float) -> None:
        self.pod_worker_duration.labels(operation_type=operation).observe(seconds)

    def pod_started(self, seconds: float) -> None:
        self.pod_start_duration.observe(seconds)

    def exposition(self) -> bytes:
        return render([self.registry])
