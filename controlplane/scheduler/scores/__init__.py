"""Score plugins, one per module. Each ranks feasible nodes 0..100; the scheduler multiplies by the
configured weight and adds them up (upstream's defaults: TaintToleration 3, NodeAffinity 2,
NodeResourcesFit 1, PodTopologySpread 2, InterPodAffinity 2, BalancedAllocation 1, ImageLocality 1)."""

from __future__ import annotations

from controlplane.scheduler.scores.balanced_allocation import BalancedAllocation
from controlplane.scheduler.scores.image_locality import ImageLocality
from controlplane.scheduler.scores.inter_pod_affinity import InterPodAffinityScore
from controlplane.scheduler.scores.node_affinity import NodeAffinityScore
from controlplane.scheduler.scores.pod_topology_spread import PodTopologySpreadScore
from controlplane.scheduler.scores.resource_allocation import ResourceAllocation
from controlplane.scheduler.scores.taint_toleration import TaintTolerationScore

__all__ = [
    "BalancedAllocation",
    "ImageLocality",
    "InterPodAffinityScore",
    "NodeAffinityScore",
    "PodTopologySpreadScore",
    "ResourceAllocation",
    "TaintTolerationScore",
]
