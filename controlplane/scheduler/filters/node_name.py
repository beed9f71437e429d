"""NodeName: a pod that already names a node fits only that node. The scheduler does not pick up such
pods, but the filter keeps the plugin set complete for callers that evaluate a pod against nodes."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

REASON = "node(s) didn't match the requested node name"


class NodeNameFilter:
    name = "NodeName"
    has_pre_filter = False  # upstream's plugin has no PreFilter (nothing to time there)

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.node_name)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        if pod.node_name and pod.node_name != node.name:
            return (REASON,)
        return FITS
