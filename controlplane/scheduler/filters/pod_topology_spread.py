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
MISSING, NO_FIT = (MISSING_LABEL_REASON,), (REASON,)
_NO_DOMAIN = 2**31 - 1  # upstream's critical-path sentinel: no domain at all


@dataclass
class SpreadState:
    counts: list[dict[str, int]] = field(default_factory=list)
    minimum: list[int] = field(default_factory=list)
    # Per constraint: 1 if the pod matches its own selector (it adds itself to the domain), read per
    # node, so matched once per pod.
    self_match: list[int] = field(default_factory=list)
    # Per constraint: (topology key, domain -> whether the pod may go there, the verdict for a domain
    # without matching pods): the skew worked out once per domain, not once per node.
    verdicts: list[tuple[str, dict[str, bool], bool]] = field(default_factory=list)

    def copy(self) -> SpreadState:
        return SpreadState([dict(c) for c in self.counts], list(self.minimum), self.self_match, self.verdicts)


def judge(pod: PodInfo, state: SpreadState) -> None:
    """Fill `state.verdicts` from its counts: a domain fits a constraint if its matching pods, plus
    the pod itself when it matches, exceed the smallest domain's count by at most maxSkew."""
    state.verdicts = []
    for c, by_value, self_match, low in zip(
        pod.spread_hard, state.counts, state.self_match, state.minimum, strict=True
    ):
        limit = c.max_skew + low - self_match  # a domain fits while its count stays within this
        by_domain = {value: count <= limit for value, count in by_value.items()}
        state.verdicts.append((c.topology_key, by_domain, 0 <= limit))


def minimums(pod: PodInfo, counts: list[dict[str, int]]) -> list[int]:
    minimum = []
    for c, by_value in zip(pod.spread_hard, counts, strict=True):
        low = min(by_value.values(), default=_NO_DOMAIN)
        minimum.append(0 if len(by_value) < c.min_domains else low)
    return minimum


def spread_state(pod: PodInfo, cluster: ClusterView) -> SpreadState:
    counts = domain_counts(pod, cluster.all_nodes, pod.spread_hard, cluster.spread_index)
    self_match = [1 if c.selector.matches(pod.labels) else 0 for c in pod.spread_hard]
    state = SpreadState(counts, minimums(pod, counts), self_match)
    judge(pod, state)
    return state


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
        judge(pod, state)


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
        labels = node.facts.labels  # type: ignore[union-attr]
        # Per constraint in order: the node must have its topology key, and its domain must fit.
        for key, by_domain, otherwise in self.state.verdicts:
            value = labels.get(key)
            if value is None:
                return MISSING
            if not by_domain.get(value, otherwise):
                return NO_FIT
        return FITS
