"""The kubelet_volume_stats_* series of the kubelet's /metrics (upstream's volume stats collector): for
each claim whose volume a pod on the node mounts, its capacity, available and used bytes and its inodes,
free and used inodes, labelled namespace and persistentvolumeclaim, each claim once, from the figures
the volume plugins measured (a CSI volume's NodeGetVolumeStats)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.volumes.plugin import VolumeUsage

LABELS = ["namespace", "persistentvolumeclaim"]
# (series suffix, help text, the VolumeUsage field), in upstream's order
SERIES = (
    ("capacity_bytes", "Capacity in bytes of the volume", "capacity"),
    ("available_bytes", "Number of available bytes in the volume", "available"),
    ("used_bytes", "Number of used bytes in the volume", "used"),
    ("inodes", "Maximum number of inodes in the volume", "inodes"),
    ("inodes_free", "Number of free inodes in the volume", "inodes_free"),
    ("inodes_used", "Number of used inodes in the volume", "inodes_used"),
)


class VolumeStatsCollector(Collector):
    def __init__(self, volumes: list[VolumeUsage]) -> None:
        self.volumes = volumes

    def collect(self) -> Iterator[Metric]:
        for suffix, text, attr in SERIES:
            family = GaugeMetricFamily(f"kubelet_volume_stats_{suffix}", f"[ALPHA] {text}", labels=LABELS)
            seen: set[tuple[str, str]] = set()
            for v in self.volumes:
                if v.claim is None or v.claim in seen:
                    continue
                seen.add(v.claim)
                family.add_metric(list(v.claim), getattr(v, attr))
            if family.samples:
                yield family


def registry_of(volumes: list[VolumeUsage]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VolumeStatsCollector(volumes))
    return registry
