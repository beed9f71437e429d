"""InterPodAffinity (filter): the pod's required pod affinity and anti-affinity, and the required
anti-affinity of the pods already placed, against the pod.

As upstream, `prepare` (PreFilter) walks the placed pods once and counts, per (topology key, value),
the pods the incoming pod's terms match and the placed pods whose anti-affinity terms match the
incoming pod; `filter` then only looks up the node's topology values in those counts, so a node's check
costs the number of terms, not the number of pods. A pod whose affinity matches no pod anywhere may
still go where all its topology keys exist if it matches its own terms (the first pod of a group that
wants to be together).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controlplane.scheduler.affinityterms import AffinityTerm
from controlplane.scheduler.framework import FITS, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.smallids import SmallIds

AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"

Pair = tuple[str, str]


def matches_all(terms: Sequence[AffinityTerm], pod: PodInfo, ns_labels: Mapping[str, str]) -> bool:
    return bool(terms) and all(t.matches(pod.namespace, pod.labels, ns_labels) for t in terms)


@dataclass
class AffinityCounts:
    """PreFilter state: pods matched per topology pair."""

    existing_anti: Counter[Pair] = field(default_factory=Counter)
    affinity: Counter[Pair] = field(default_factory=Counter)
    anti: Counter[Pair] = field(default_factory=Counter)
    self_match: bool = False  # no pod matches, but the pod matches all its own affinity terms

    def copy(self) -> AffinityCounts:
        return AffinityCounts(
            Counter(self.existing_anti), Counter(self.affinity), Counter(self.anti), self.self_match
        )


term_id = SmallIds()


def term_count(
    node: NodeInfo, term: AffinityTerm, key: tuple[str, int], ns_of: Mapping[str, Mapping[str, str]]
) -> int:
    """The node's pods (terminating ones too, as upstream) that `term` is about; remembered on the node
    until its pods change when the term names its namespaces (a namespaceSelector's verdict can change
    with a namespace's labels)."""
    remember = term.namespace_selector.nothing
    if remember:
        found = node.match_counts.get(key)
        if found is not None:
            return found
    count = sum(
        1 for p in node.pods.values() if term.matches(p.namespace, p.labels, ns_of.get(p.namespace, {}))
    )
    if remember:
        node.match_counts[key] = count
    return count


def affinity_counts(pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> AffinityCounts:
    ns_of = cluster.namespace_labels
    own_ns = ns_of.get(pod.namespace, {})
    state = AffinityCounts()
    required = pod.affinity.required_affinity
    required_anti = pod.affinity.required_anti_affinity
    verdicts: dict[int, bool] = {}  # one match per distinct placed term
    matched_by: dict[tuple[str, tuple[tuple[str, str], ...]], bool] = {}  # one per distinct labels
    anti_keys = [(t, (":affinity", term_id(t))) for t in required_anti]
    if not required and not required_anti and cluster.anti_affinity_nodes is not None:
        nodes = cluster.anti_affinity_nodes  # only placed pods' anti-affinity can reject this pod
    for node in nodes:
        assert node.facts is not None
        labels = node.facts.labels
        for term, holders in node.anti_terms.items():
            value = labels.get(term.topology_key)
            if value is None:
                continue
            hit = verdicts.get(id(term))
            if hit is None:
                hit = verdicts[id(term)] = term.matches(pod.namespace, pod.labels, own_ns)
            if hit:
                state.existing_anti[(term.topology_key, value)] += holders
        if not required and not required_anti:
            continue
        for term, key in anti_keys:
            value = labels.get(term.topology_key)
            if value is not None:
                matching = term_count(node, term, key, ns_of)
                if matching:
                    state.anti[(term.topology_key, value)] += matching
        if not required:
            continue
        for group, pods in node.label_groups.items():  # placed pods by (namespace, labels)
            matched = matched_by.get(group)
            if matched is None:
                namespace, label_key = group
                matched = matched_by[group] = all(
                    t.matches(namespace, dict(label_key), ns_of.get(namespace, {})) for t in required
                )
            if matched:
                for term in required:
                    value = labels.get(term.topology_key)
                    if value is not None:
                        state.affinity[(term.topology_key, value)] += pods
    state.self_match = not state.affinity and matches_all(required, pod, own_ns)
    return state


def _bump(counts: Counter[Pair], pair: Pair, delta: int) -> None:
    left = counts[pair] + delta
    if left > 0:
        counts[pair] = left
    else:
        del counts[pair]  # upstream drops a pair whose count reaches 0


def update_with_pod(
    state: AffinityCounts,
    pod: PodInfo,
    other: PodInfo,
    node: NodeInfo,
    ns_of: Mapping[str, Mapping[str, str]],
    delta: int,
) -> None:
    """Upstream's updateWithPod: `other` placed on (1) or taken off (-1) `node`, the counts kept as if
    `prepare` had walked the cluster again."""
    assert node.facts is not None
    labels = node.facts.labels
    own_ns = ns_of.get(pod.namespace, {})
    other_ns = ns_of.get(other.namespace, {})
    for term in other.affinity.required_anti_affinity:
        value = labels.get(term.topology_key)
        if value is not None and term.matches(pod.namespace, pod.labels, own_ns):
            _bump(state.existing_anti, (term.topology_key, value), delta)
    required = pod.affinity.required_affinity
    if required and matches_all(required, other, other_ns):
        for term in required:
            value = labels.get(term.topology_key)
            if value is not None:
                _bump(state.affinity, (term.topology_key, value), delta)
    for term in pod.affinity.required_anti_affinity:
        value = labels.get(term.topology_key)
        if value is not None and term.matches(other.namespace, other.labels, other_ns):
            _bump(state.anti, (term.topology_key, value), delta)
    state.self_match = not state.affinity and matches_all(required, pod, own_ns)


def check(pod: PodInfo, node: NodeInfo, state: AffinityCounts) -> tuple[str, ...]:
    assert node.facts is not None
    labels = node.facts.labels
    found = True
    for term in pod.affinity.required_affinity:
        value = labels.get(term.topology_key)
        if value is None:
            return (AFFINITY_REASON,)  # every topology key must exist on the node
        if state.affinity[(term.topology_key, value)] <= 0:
            found = False
    if not found and not state.self_match:
        return (AFFINITY_REASON,)
    if state.anti:
        for term in pod.affinity.required_anti_affinity:
            value = labels.get(term.topology_key)
            if value is not None and state.anti[(term.topology_key, value)] > 0:
                return (ANTI_AFFINITY_REASON,)
    if state.existing_anti:
        for pair in labels.items():
            if state.existing_anti[pair] > 0:
                return (EXISTING_ANTI_AFFINITY_REASON,)
    return FITS


class InterPodAffinityFilter:
    name = "InterPodAffinity"

    def __init__(self) -> None:
        self.state = AffinityCounts()
        self.active = False
        self.namespace_labels: Mapping[str, Mapping[str, str]] = {}

    def applies(self, pod: PodInfo) -> bool:
        return True  # placed pods' anti-affinity may reject it; `prepare` decides

    def prepare(self, pod: PodInfo, cluster: ClusterView) -> None:
        self.state = affinity_counts(pod, cluster.all_nodes, cluster)
        self.namespace_labels = cluster.namespace_labels
        self._activate(pod)

    def _activate(self, pod: PodInfo) -> None:
        self.active = bool(
            pod.affinity.required_affinity or pod.affinity.required_anti_affinity or self.state.existing_anti
        )

    # PreFilter extensions (preemption's what-if on one node): the state follows pods added and removed.
    def save(self) -> AffinityCounts:
        return self.state

    def restore(self, saved: AffinityCounts, pod: PodInfo) -> None:
        self.state = saved.copy()
        self._activate(pod)

    def add_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        update_with_pod(self.state, pod, other, node, self.namespace_labels, 1)
        self._activate(pod)

    def remove_pod(self, pod: PodInfo, other: PodInfo, node: NodeInfo) -> None:
        update_with_pod(self.state, pod, other, node, self.namespace_labels, -1)
        self._activate(pod)

    def idle(self, pod: PodInfo, cluster: ClusterView) -> bool:
        return not self.active  # no terms of its own, and no placed pod's anti-affinity matches it

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        if not self.active:
            return FITS
        return check(pod, node, self.state)
