"""TaintToleration (filter): a NoSchedule or NoExecute taint the pod does not tolerate keeps it off the
node. This includes node.kubernetes.io/not-ready and unreachable, which the node lifecycle controller
sets: the scheduler reads node health through taints only, as upstream does."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.taints import first_untolerated


def reason(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class TaintTolerationFilter:
    name = "TaintToleration"
    has_pre_filter = False  # upstream's plugin has no PreFilter (nothing to time there)

    def applies(self, pod: PodInfo) -> bool:
        return True  # depends on the node

    def idle(self, pod: PodInfo, cluster: ClusterView) -> bool:
        return not cluster.any_taints

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        if not node.facts.taints:
            return FITS
        taint = first_untolerated(node.facts.taints, pod.tolerations)
        if taint is None:
            return FITS
        return (reason(taint.key, taint.value),)
