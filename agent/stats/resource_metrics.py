"""/metrics/resource: upstream's resource metrics collector (pkg/kubelet/metrics/collectors/
resource_metrics.go), what metrics-server scrapes. A custom prometheus_client collector over one
CPU-and-memory Summary per scrape, so series of removed containers never linger; each sample carries
the time of its stats as its timestamp, except container_start_time_seconds and resource_scrape_error,
which upstream sends without one. A failed pass gives resource_scrape_error 1 and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.stats.model import Summary
from kubeclient import exposition

_CONTAINER = ["container", "pod", "namespace"]
_POD = ["pod", "namespace"]


def _help(text: str) -> str:
    return f"[STABLE] {text}"


class ResourceMetrics(Collector):
    """Collects from the Summary set by `use` (prometheus_client's collect is synchronous; the async
    pass runs first, then the registry renders)."""

    def __init__(self) -> None:
        self.summary: Summary | None = None
        self.failed = False

    def collect(self) -> Iterator[Metric]:
        node_cpu = CounterMetricFamily(
            "node_cpu_usage_seconds_total", _help("Cumulative cpu time consumed by the node in core-seconds")
        )
        node_mem = GaugeMetricFamily(
            "node_memory_working_set_bytes", _help("Current working set of the node in bytes")
        )
        start = GaugeMetricFamily(
            "container_start_time_seconds",
            _help("Start time of the container since unix epoch in seconds"),
            labels=_CONTAINER,
        )
        c_cpu = CounterMetricFamily(
            "container_cpu_usage_seconds_total",
            _help("Cumulative cpu time consumed by the container in core-seconds"),
            labels=_CONTAINER,
        )
        c_mem = GaugeMetricFamily(
            "container_memory_working_set_bytes",
            _help("Current working set of the container in bytes"),
            labels=_CONTAINER,
        )
        p_cpu = CounterMetricFamily(
            "pod_cpu_usage_seconds_total",
            _help("Cumulative cpu time consumed by the pod in core-seconds"),
            labels=_POD,
        )
        p_mem = GaugeMetricFamily(
            "pod_memory_working_set_bytes", _help("Current working set of the pod in bytes"), labels=_POD
        )
        # Swap (upstream's ALPHA series, 1.28+; only where swap is accounted).
        node_swap = GaugeMetricFamily(
            "node_swap_usage_bytes",
            "[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems",
        )
        c_swap = GaugeMetricFamily(
            "container_swap_usage_bytes",
            "[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems",
            labels=_CONTAINER,
        )
        p_swap = GaugeMetricFamily(
            "pod_swap_usage_bytes",
            "[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems",
            labels=_POD,
        )
        error = GaugeMetricFamily(
            "resource_scrape_error",
            _help("1 if there was an error while getting container metrics, 0 otherwise"),
        )
        s = self.summary
        if s is not None and not self.failed:
            n = s.node
            if n.cpu is not None and n.cpu.usage_core_nano_seconds is not None:
                node_cpu.add_metric([], n.cpu.usage_core_nano_seconds / 1e9, timestamp=n.cpu.time)
            if n.memory is not None and n.memory.working_set_bytes is not None:
                node_mem.add_metric([], n.memory.working_set_bytes, timestamp=n.memory.time)
            if n.swap is not None and n.swap.swap_usage_bytes is not None:
                node_swap.add_metric([], n.swap.swap_usage_bytes, timestamp=n.swap.time)
            for pod in s.pods:
                ref = [pod.ref.name, pod.ref.namespace]
                for c in pod.containers:
                    labels = [c.name, *ref]
                    if c.start_time > 0:
                        start.add_metric(labels, c.start_time)
                    if c.cpu is not None and c.cpu.usage_core_nano_seconds is not None:
                        c_cpu.add_metric(labels, c.cpu.usage_core_nano_seconds / 1e9, timestamp=c.cpu.time)
                    if c.memory is not None and c.memory.working_set_bytes is not None:
                        c_mem.add_metric(labels, c.memory.working_set_bytes, timestamp=c.memory.time)
                    if c.swap is not None and c.swap.swap_usage_bytes is not None:
                        c_swap.add_metric(labels, c.swap.swap_usage_bytes, timestamp=c.swap.time)
                if pod.cpu is not None and pod.cpu.usage_core_nano_seconds is not None:
                    p_cpu.add_metric(ref, pod.cpu.usage_core_nano_seconds / 1e9, timestamp=pod.cpu.time)
                if pod.memory is not None and pod.memory.working_set_bytes is not None:
                    p_mem.add_metric(ref, pod.memory.working_set_bytes, timestamp=pod.memory.time)
                if pod.swap is not None and pod.swap.swap_usage_bytes is not None:
                    p_swap.add_metric(ref, pod.swap.swap_usage_bytes, timestamp=pod.swap.time)
        error.add_metric([], 1.0 if self.failed else 0.0)
        # As upstream's registry, a family without samples is not written at all.
        yield from (
            m
            for m in (node_cpu, node_mem, node_swap, start, c_cpu, c_mem, c_swap, p_cpu, p_mem, p_swap, error)
            if m.samples
        )


def render(summary: Summary | None) -> bytes:
    """The exposition of one pass; `None` is a failed pass."""
    collector = ResourceMetrics()
    collector.summary = summary
    collector.failed = summary is None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return exposition.render([registry])
