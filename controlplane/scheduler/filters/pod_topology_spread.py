"""PodTopologySpread (filter): the pod's DoNotSchedule constraints.

`prepare` counts the matching pods of every topology domain once per pod; a node then fits if it has
the constraint's topology key and placing the pod there keeps `matching pods in its domain + (1 if the
pod matches its own selector) - the smallest domain's count` within maxSkew. When fewer domains than
minDomains exist, the smallest count is taken as 0, so pods wait for new domains rather than pile up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.scheduler.framework import FITS, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.topologyspread import domain_counts

REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL_REASON = REASON + " (missing required label)"
_NO_DOMAIN = 2**31 - 1  # upstream's critical-path sentinel: no domain at all


@dataclass
class SpreadState:
    counts: list[dict[str, int]] = field(default_factory=list)
    minimum: list[int] = field(default_factory=list)


def spread_state(pod: PodInfo, cluster: ClusterView) -> SpreadState:
    constraints = pod.spread_hard
    counts = domain_counts(pod, cluster.all_nodes, constraints)
    minimum = []
    for c, by_value in zip(constraints, counts, strict=True):
        low = min(by_value.values(), default=_NO_DOMAIN)
        minimum.append(0 if len(by_value) < c.min_domains else low)
    return SpreadState(counts, minimum)


def check(pod: PodInfo, node: NodeInfo, state: SpreadState) -> tuple[str, ...]:
    assert node.facts is not None
    labels = node.facts.labels
    for i, c in enumerate(pod.spread_hard):
        value = labels.get(c.topology_key)
        if value is None:
            return (MISSING_LABEL_REASON,)
        self_match = 1 if c.selector.matches(pod.labels) else 0
        if state.counts[i].get(value, 0) + self_match - state.minimum[i] > c.max_skew:
            return (REASON,)
    return FITS


class PodTopologySpreadFilter:
    name = "PodTopologySpread"

    def __init__(self) -> None:
        self.state = SpreadState()

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.spread_hard)

    def prepare(self, pod: PodInfo, cluster: ClusterView) -> None:
        self.state = spread_state(pod, cluster)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        return check(pod, node, self.state)
