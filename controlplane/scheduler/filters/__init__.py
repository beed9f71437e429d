"""Filter plugins, one per module, in upstream's default order (the first failing filter names the
reason a node is rejected, so the order shows in the FailedScheduling message)."""

from __future__ import annotations

from controlplane.scheduler.filters.inter_pod_affinity import InterPodAffinityFilter
from controlplane.scheduler.filters.node_affinity import NodeAffinityFilter
from controlplane.scheduler.filters.node_name import NodeNameFilter
from controlplane.scheduler.filters.node_ports import NodePortsFilter
from controlplane.scheduler.filters.node_resources_fit import NodeResourcesFitFilter
from controlplane.scheduler.filters.node_unschedulable import NodeUnschedulableFilter
from controlplane.scheduler.filters.pod_topology_spread import PodTopologySpreadFilter
from controlplane.scheduler.filters.taint_toleration import TaintTolerationFilter
from controlplane.scheduler.framework import FilterPlugin


def default_filters(*volume_filters: FilterPlugin) -> list[FilterPlugin]:
    """Upstream's order, the volume filters (VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
    VolumeZone) between NodeResourcesFit and PodTopologySpread."""
    return [
        NodeUnschedulableFilter(),
        NodeNameFilter(),
        TaintTolerationFilter(),
        NodeAffinityFilter(),
        NodePortsFilter(),
        NodeResourcesFitFilter(),
        *volume_filters,
        PodTopologySpreadFilter(),
        InterPodAffinityFilter(),
    ]


__all__ = [
    "InterPodAffinityFilter",
    "PodTopologySpreadFilter",
    "NodeAffinityFilter",
    "NodeNameFilter",
    "NodePortsFilter",
    "NodeResourcesFitFilter",
    "NodeUnschedulableFilter",
    "TaintTolerationFilter",
    "default_filters",
]
