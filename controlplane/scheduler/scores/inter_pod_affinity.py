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
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.scheduler.affinityterms import AffinityTerm
from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
from controlplane.scheduler.nodeinfo import PREFERRED_AFFINITY, REQUIRED_AFFINITY, NodeInfo
from controlplane.scheduler.podinfo import PodInfo

HARD_POD_AFFINITY_WEIGHT = 1  # upstream's InterPodAffinityArgs default

TopologyScore = dict[str, dict[str, int]]


def _own_matches(
    pod: PodInfo, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str]
) -> list[tuple[str, int]]:
    """The incoming pod's preferred terms a placed pod (in `namespace`, with `labels`) matches:
    (topology key, signed weight)."""
    own = pod.affinity
    hits = [
        (t.topology_key, t.weight) for t in own.preferred_affinity if t.matches(namespace, labels, ns_labels)
    ]
    hits += [
        (t.topology_key, -t.weight)
        for t in own.preferred_anti_affinity
        if t.matches(namespace, labels, ns_labels)
    ]
    return hits


def _signed_weight(kind: int, term: AffinityTerm) -> int:
    if kind == REQUIRED_AFFINITY:
        return HARD_POD_AFFINITY_WEIGHT
    return term.weight if kind == PREFERRED_AFFINITY else -term.weight


def topology_score(pod: PodInfo, cluster: ClusterView) -> TopologyScore:
    """Per topology key and value, the summed weights; each node's pods visited by group (pods with
    the same namespace and labels, and pods holding the same term), not one by one."""
    score: TopologyScore = {}
    own = pod.affinity
    has_preferred = bool(own.preferred_affinity or own.preferred_anti_affinity)
    ns_of = cluster.namespace_labels
    own_ns = ns_of.get(pod.namespace, {})
    memo: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[str, int]]] = {}
    verdicts: dict[tuple[int, int], int | None] = {}  # (id(term), kind) -> signed weight if it matches

    def bump(topology_key: str, value: str, delta: int) -> None:
        by_value = score.setdefault(topology_key, defaultdict(int))
        by_value[value] += delta

    for node in cluster.all_nodes if has_preferred else with_affinity(cluster):
        assert node.facts is not None
        labels = node.facts.labels
        if not labels:
            continue
        if has_preferred:
            for group, pods in node.label_groups.items():
                hits = memo.get(group)
                if hits is None:
                    namespace, label_key = group
                    hits = memo[group] = _own_matches(
                        pod, namespace, dict(label_key), ns_of.get(namespace, {})
                    )
                for topology_key, weight in hits:
                    value = labels.get(topology_key)
                    if value is not None:
                        bump(topology_key, value, weight * pods)
        for (kind, term), holders in node.scored_terms.items():
            value = labels.get(term.topology_key)
            if value is None:
                continue
            key = (id(term), kind)
            if key in verdicts:
                weight = verdicts[key]
            else:
                matched = term.matches(pod.namespace, pod.labels, own_ns)
                weight = verdicts[key] = _signed_weight(kind, term) if matched else None
            if weight is not None:
                bump(term.topology_key, value, weight * holders)
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
