"""NodePorts: two pods on one node cannot both hold the same hostPort/protocol, unless they bind
different specific addresses (0.0.0.0 conflicts with everything)."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePortsFilter:
    name = "NodePorts"

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.host_ports)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        if not pod.host_ports or not node.ports:
            return FITS
        for want in pod.host_ports:
            for used in node.ports:
                if want.conflicts(used):
                    return (REASON,)
        return FITS
