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
from controlplane.scheduler.topologyspread import domain_counts, has_all_keys, node_included

REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL_REASON = REASON + " (missing required label)"
_NO_DOMAIN = 2**31 - 1  # upstream's critical-path sentinel: no domain at all


@dataclass
class SpreadState:
    counts: list[dict[str, int]] = field(default_factory=list)
    minimum: list[int] = field(default_factory=list)
    # Per constraint: 1 if the pod matches its own selector (it adds itself to the domain), read per
    # node, so matched once per pod.
    self_match: list[int] = field(default_factory=list)

    def copy(self) -> SpreadState:
        return SpreadState([dict(c) for c in self.counts], list(self.minimum), self.self_match)


def minimums(pod: PodInfo, counts: list[dict[str, int]]) -> list[int]:
    minimum = []
    for c, by_value in zip(pod.spread_hard, counts, strict=True):
        low = min(by_value.values(), default=_NO_DOMAIN)
        minimum.append(0 if len(by_value) < c.min_domains else low)
    return minimum


def spread_state(pod: PodInfo, cluster: ClusterView) -> SpreadState:
    counts = domain_counts(pod, cluster.all_nodes, pod.spread_hard, cluster.spread_index)
    self_match = [1 if c.selector.matches(pod.labels) else 0 for c in pod.spread_hard]
    return SpreadState(counts, minimums(pod, counts), self_match)


def update_with_pod(state: SpreadState, pod: PodInfo, other: PodInfo, node: NodeInfo, delta: int) -> None:
    """Upstream's updateWithPod: `other` added to (1) or removed from (-1) `node` changes its domain's
    count for each constraint whose selector it matches, if the node counts for that constraint."""
    assert node.facts is not None
    labels = node.facts.labels
    if other.namespace != pod.namespace or other.deleting or not has_all_keys(labels, pod.spread_hard):
        return
    changed = False
    for i, c in enumerate(pod.spread_hard):
        if not node_included(pod, node, c) or not c.selector.matches(other.labels):
            continue
        value = labels[c.topology_key]
        state.counts[i][value] = state.counts[i].get(value, 0) + delta
        changed = True
    if changed:
        state.minimum = minimums(pod, state.counts)


def check(pod: PodInfo, node: NodeInfo, state: SpreadState) -> tuple[str, ...]:
    assert node.facts is not None
    labels = node.facts.labels
    for i, c in enumerate(pod.spread_hard):
        value = labels.get(c.topology_key)
        if value is None:
            return (MISSING_LABEL_REASON,)
        if state.counts[i].get(value, 0) + state.self_match[i] - state.minimum[i] > c.max_skew:
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

    # PreFilter extensions (preemption's what-if on one node): the counts follow pods added and removed.
    def save(self) -> SpreadState:
        return self.state

    def restore(self, saved: SpreadState, pod: PodInfo) -> None:
        self.state = saved.copy()

    def add_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        update_with_pod(self.state, pod, other, node, 1)

    def remove_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        update_with_pod(self.state, pod, other, node, -1)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        return check(pod, node, self.state)
