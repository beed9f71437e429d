"""/metrics/cadvisor: the core series of cadvisor's Prometheus collector, as the kubelet serves them,
from one full Summary: CPU, memory (working set, usage, RSS), network (per interface, on the pod's
cgroup, whose processes share the sandbox's namespace) and the containers' writable-layer usage. Labels
are cadvisor's: id (the cgroup), image, name (the runtime's container ID), container, pod, namespace;
the node's root cgroup is id="/" with the others empty. Samples carry their stats' time."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.stats.model import CpuStats, FsStats, MemoryStats, NetworkStats, Summary
from kubeclient import exposition

LABELS = ["container", "id", "image", "name", "namespace", "pod"]


@dataclass(frozen=True)
class Series:
    """One cgroup as cadvisor labels it."""

    labels: tuple[str, str, str, str, str, str]  # in LABELS order
    cpu: CpuStats | None = None
    memory: MemoryStats | None = None
    network: NetworkStats | None = None
    rootfs: FsStats | None = None
    device: str = ""


def series_of(summary: Summary) -> list[Series]:
    """The node's root cgroup, each pod's cgroup and each container's, from the Summary."""
    out = [Series(("", "/", "", "", "", ""), summary.node.cpu, summary.node.memory, summary.node.network)]
    for pod in summary.pods:
        ns, name = pod.ref.namespace, pod.ref.name
        if pod.cgroup:
            out.append(Series(("", pod.cgroup, "", "", ns, name), pod.cpu, pod.memory, pod.network))
        for c in pod.containers:
            cid = f"{pod.cgroup}/{c.id}" if pod.cgroup else f"/{c.id}"
            out.append(
                Series(
                    (c.name, cid, c.image, c.id, ns, name), c.cpu, c.memory, None, c.rootfs, c.rootfs_device
                )
            )
    return out


class CadvisorMetrics(Collector):
    def __init__(self, series: list[Series]) -> None:
        self.series = series

    def collect(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily(
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in seconds.",
            labels=[*LABELS[:1], "cpu", *LABELS[1:]],
        )
        ws = GaugeMetricFamily(
            "container_memory_working_set_bytes", "Current working set in bytes.", labels=LABELS
        )
        usage = GaugeMetricFamily(
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            labels=LABELS,
        )
        rss = GaugeMetricFamily("container_memory_rss", "Size of RSS in bytes.", labels=LABELS)
        net_labels = [*LABELS[:3], "interface", *LABELS[3:]]
        rx = CounterMetricFamily(
            "container_network_receive_bytes_total", "Cumulative count of bytes received", labels=net_labels
        )
        tx = CounterMetricFamily(
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
            labels=net_labels,
        )
        fs = GaugeMetricFamily(
            "container_fs_usage_bytes",
            "Number of bytes that are consumed by the container on this filesystem.",
            labels=[*LABELS[:1], "device", *LABELS[1:]],
        )
        for s in self.series:
            lab = list(s.labels)
            if s.cpu is not None and s.cpu.usage_core_nano_seconds is not None:
                cpu.add_metric(
                    [lab[0], "total", *lab[1:]], s.cpu.usage_core_nano_seconds / 1e9, timestamp=s.cpu.time
                )
            m = s.memory
            if m is not None:
                if m.working_set_bytes is not None:
                    ws.add_metric(lab, m.working_set_bytes, timestamp=m.time)
                if m.usage_bytes is not None:
                    usage.add_metric(lab, m.usage_bytes, timestamp=m.time)
                if m.rss_bytes is not None:
                    rss.add_metric(lab, m.rss_bytes, timestamp=m.time)
            if s.network is not None:
                for i in s.network.interfaces:
                    nl = [*lab[:3], i.name, *lab[3:]]
                    rx.add_metric(nl, i.rx_bytes, timestamp=s.network.time)
                    tx.add_metric(nl, i.tx_bytes, timestamp=s.network.time)
            if s.rootfs is not None and s.rootfs.used_bytes is not None:
                fs.add_metric([lab[0], s.device, *lab[1:]], s.rootfs.used_bytes, timestamp=s.rootfs.time)
        yield from (f for f in (cpu, ws, usage, rss, rx, tx, fs) if f.samples)


def render(series: list[Series]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CadvisorMetrics(series))
    return exposition.render([registry])
