"""InterPodAffinity (score): preferred affinity and anti-affinity, both ways.

As upstream's, for every placed pod P on a node with topology value v: the incoming pod's preferred
affinity terms matching P add their weight to every node sharing v (anti-affinity terms subtract it);
P's own required affinity terms matching the incoming pod add the hard-affinity weight (1), and P's
preferred (anti-)affinity terms matching it add (subtract) their weights. Nodes are then scaled between
the lowest and highest sums to 0..100. Only pods with affinity terms are visited unless the incoming
pod has preferred terms of its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controlplane.scheduler.affinityterms import AffinityTerm
from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

HARD_POD_AFFINITY_WEIGHT = 1  # upstream's InterPodAffinityArgs default

TopologyScore = dict[str, dict[str, int]]


def _add(
    score: TopologyScore,
    terms: Iterable[AffinityTerm],
    target: PodInfo,
    ns_labels: Mapping[str, str],
    node_labels: Mapping[str, str],
    sign: int,
    weight: int | None = None,
) -> None:
    for term in terms:
        value = node_labels.get(term.topology_key)
        if value is not None and term.matches(target.namespace, target.labels, ns_labels):
            by_value = score.setdefault(term.topology_key, defaultdict(int))
            by_value[value] += sign * (term.weight if weight is None else weight)


def _own_matches(pod: PodInfo, existing: PodInfo, ns_labels: Mapping[str, str]) -> list[tuple[str, int]]:
    """The incoming pod's preferred terms an existing pod matches: (topology key, signed weight)."""
    own = pod.affinity
    hits = [
        (t.topology_key, t.weight)
        for t in own.preferred_affinity
        if t.matches(existing.namespace, existing.labels, ns_labels)
    ]
    hits += [
        (t.topology_key, -t.weight)
        for t in own.preferred_anti_affinity
        if t.matches(existing.namespace, existing.labels, ns_labels)
    ]
    return hits


def topology_score(pod: PodInfo, cluster: ClusterView) -> TopologyScore:
    score: TopologyScore = {}
    own = pod.affinity
    has_preferred = bool(own.preferred_affinity or own.preferred_anti_affinity)
    ns_of = cluster.namespace_labels
    own_ns = ns_of.get(pod.namespace, {})
    memo: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[str, int]]] = {}
    for node in cluster.all_nodes if has_preferred else with_affinity(cluster):
        assert node.facts is not None
        labels = node.facts.labels
        if not labels:
            continue
        for existing in (node.pods if has_preferred else node.affinity_pods).values():
            if has_preferred:
                key = (existing.namespace, existing.label_key)
                hits = memo.get(key)
                if hits is None:
                    hits = memo[key] = _own_matches(pod, existing, ns_of.get(existing.namespace, {}))
                for topology_key, delta in hits:
                    value = labels.get(topology_key)
                    if value is not None:
                        by_value = score.setdefault(topology_key, defaultdict(int))
                        by_value[value] += delta
            theirs = existing.affinity
            if theirs.any:
                _add(score, theirs.required_affinity, pod, own_ns, labels, 1, HARD_POD_AFFINITY_WEIGHT)
                _add(score, theirs.preferred_affinity, pod, own_ns, labels, 1)
                _add(score, theirs.preferred_anti_affinity, pod, own_ns, labels, -1)
    return score


def with_affinity(cluster: ClusterView) -> Sequence[NodeInfo]:
    """The nodes whose pods have affinity terms (all that matter to a pod without preferred terms)."""
    if cluster.affinity_nodes is not None:
        return cluster.affinity_nodes
    return [n for n in cluster.all_nodes if n.affinity_pods]


class InterPodAffinityScore:
    name = "InterPodAffinity"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        own = pod.affinity
        if not (own.preferred_affinity or own.preferred_anti_affinity) and not with_affinity(cluster):
            return SKIP
        score = topology_score(pod, cluster)
        return score if score else SKIP

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        out = []
        for node in nodes:
            assert node.facts is not None
            labels = node.facts.labels
            total = 0
            for key, by_value in state.items():
                value = labels.get(key)
                if value is not None:
                    total += by_value.get(value, 0)
            out.append(total)
        return out

    def normalize(self, scores: list[int]) -> list[int]:
        if not scores:
            return scores
        low, high = min(scores), max(scores)
        spread = high - low
        if spread <= 0:
            return [0] * len(scores)
        return [int(MAX_NODE_SCORE * (s - low) / spread) for s in scores]
