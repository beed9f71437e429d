"""Filter plugins, one per module, in upstream's default order (the first failing filter names the
reason a node is rejected, so the order shows in the FailedScheduling message)."""

from __future__ import annotations

from controlplane.scheduler.filters.node_affinity import NodeAffinityFilter
from controlplane.scheduler.filters.node_name import NodeNameFilter
from controlplane.scheduler.filters.node_ports import NodePortsFilter
from controlplane.scheduler.filters.node_resources_fit import NodeResourcesFitFilter
from controlplane.scheduler.filters.node_unschedulable import NodeUnschedulableFilter
from controlplane.scheduler.filters.taint_toleration import TaintTolerationFilter
from controlplane.scheduler.framework import FilterPlugin


def default_filters() -> list[FilterPlugin]:
    return [
        NodeUnschedulableFilter(),
        NodeNameFilter(),
        TaintTolerationFilter(),
        NodeAffinityFilter(),
        NodePortsFilter(),
        NodeResourcesFitFilter(),
    ]


__all__ = [
    "NodeAffinityFilter",
    "NodeNameFilter",
    "NodePortsFilter",
    "NodeResourcesFitFilter",
    "NodeUnschedulableFilter",
    "TaintTolerationFilter",
    "default_filters",
]
