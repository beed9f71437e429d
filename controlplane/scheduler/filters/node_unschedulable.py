"""NodeUnschedulable: a cordoned node (spec.unschedulable) takes only pods that tolerate the
node.kubernetes.io/unschedulable:NoSchedule taint (DaemonSet pods do)."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.taints import NO_SCHEDULE, TAINT_UNSCHEDULABLE, Taint, tolerated

REASON = "node(s) were unschedulable"
_TAINT = Taint(TAINT_UNSCHEDULABLE, "", NO_SCHEDULE)


class NodeUnschedulableFilter:
    name = "NodeUnschedulable"
    has_pre_filter = False  # upstream's plugin has no PreFilter (nothing to time there)

    def applies(self, pod: PodInfo) -> bool:
        return True  # depends on the node

    def idle(self, pod: PodInfo, cluster: ClusterView) -> bool:
        return not cluster.any_unschedulable

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        if node.facts.unschedulable and not tolerated(_TAINT, pod.tolerations):
            return (REASON,)
        return FITS
