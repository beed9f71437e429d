"""metrics-server's own metrics under its names (pkg/scraper, pkg/server, pkg/storage of
kubernetes-sigs/metrics-server), served at /metrics on its secure port to authorized callers: the
kubelet requests it made (count by success, duration and last time per node), each scrape round's
duration, and the points it holds (read at scrape time)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubeclient.exposition import render

# prometheus.DefBuckets
DEF_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Points(Collector):
    def __init__(self, points: Callable[[], dict[str, int]]) -> None:
        self.points = points

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "metrics_server_storage_points", "[ALPHA] Number of metrics points stored.", labels=["type"]
        )
        for kind, count in sorted(self.points().items()):
            family.add_metric([kind], count)
        yield family


class MetricsServerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.points: Callable[[], dict[str, int]] = dict
        self.requests = Counter(
            "metrics_server_kubelet_request",
            "[ALPHA] Number of requests sent to Kubelet API",
            ["success"],
            registry=r,
        )
        self.request_duration = Histogram(
            "metrics_server_kubelet_request_duration_seconds",
            "[ALPHA] Duration of requests to Kubelet API in seconds",
            ["node"],
            buckets=DEF_BUCKETS,
            registry=r,
        )
        self.last_request = Gauge(
            "metrics_server_kubelet_last_request_time_seconds",
            "[ALPHA] Time of last request performed to Kubelet API since unix epoch in seconds",
            ["node"],
            registry=r,
        )
        self.tick_duration = Histogram(
            "metrics_server_manager_tick_duration_seconds",
            "[ALPHA] The total time spent collecting and storing metrics in seconds",
            buckets=DEF_BUCKETS,
            registry=r,
        )
        r.register(_Points(lambda: self.points()))

    def kubelet_request(self, node: str, started: float, seconds: float, success: bool) -> None:
        """One scrape of a kubelet: `started` is its wall-clock start, `seconds` how long it took."""
        self.requests.labels("true" if success else "false").inc()
        self.request_duration.labels(node).observe(seconds)
        self.last_request.labels(node).set(started)

    def exposition(self) -> bytes:
        return render([self.registry])
