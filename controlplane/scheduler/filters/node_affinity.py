"""NodeAffinity (filter): spec.nodeSelector must match the node's labels exactly, and, if present, one of
the required node affinity terms must match."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo, node_matches

REASON = "node(s) didn't match Pod's node affinity/selector"


class NodeAffinityFilter:
    name = "NodeAffinity"

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.node_selector) or pod.required_terms is not None

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        if not pod.node_selector and pod.required_terms is None:
            return FITS
        return FITS if node_matches(pod, node.facts.labels, node.name) else (REASON,)
