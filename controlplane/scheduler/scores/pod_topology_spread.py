"""PodTopologySpread (score): fewer matching pods in a node's domains is better.

The pod's ScheduleAnyway constraints, or, for a pod without constraints, the cluster defaults
(hostname maxSkew 3, zone maxSkew 5) with the selector of the Services and controllers selecting it.
As upstream: a node's raw score is the sum over constraints of `matching pods in its domain *
log(domains + 2) + (maxSkew - 1)`, rounded; feasible nodes lacking a key of the pod's own constraints are
ignored (score 0); the rest are scaled as `100 * (max + min - score) / max`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.affinityterms import SpreadConstraint
from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.topologyspread import (
    HOSTNAME,
    count_matching,
    default_constraints,
    domain_counts,
    has_all_keys,
    selector_id,
)


@dataclass
class ScoreState:
    constraints: tuple[SpreadConstraint, ...]
    counts: list[dict[str, int]]
    weights: list[float]
    ignored: set[str]
    keys: list[tuple[str, int]]  # per-node memo keys of the constraints' selectors


class PodTopologySpreadScore:
    name = "PodTopologySpread"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        if pod.spread_given:
            constraints = pod.spread_soft
        else:
            selector = cluster.default_selector(pod) if cluster.default_selector else None
            constraints = default_constraints(selector) if selector is not None else ()
        if not constraints:
            return SKIP
        require_all = pod.spread_given
        ignored = set()
        domains: list[set[str]] = [set() for _ in constraints]
        for node in nodes:
            assert node.facts is not None
            labels = node.facts.labels
            if require_all and not has_all_keys(labels, constraints):
                ignored.add(node.name)
                continue
            for i, c in enumerate(constraints):
                if c.topology_key != HOSTNAME:
                    domains[i].add(labels.get(c.topology_key, ""))
        weights = []
        for i, c in enumerate(constraints):
            size = len(nodes) - len(ignored) if c.topology_key == HOSTNAME else len(domains[i])
            weights.append(math.log(size + 2))
        index = cluster.spread_index
        counts = (
            domain_counts(pod, cluster.all_nodes, constraints, index)
            if require_all
            else [domain_counts(pod, cluster.all_nodes, (c,), index)[0] for c in constraints]
        )
        # Only domains of feasible nodes matter (upstream counts no others).
        counts = [{v: n for v, n in by.items() if v in domains[i]} for i, by in enumerate(counts)]
        keys = [(pod.namespace, selector_id(c.selector)) for c in constraints]
        return ScoreState(constraints, counts, weights, ignored, keys)

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        out = []
        for node in nodes:
            assert node.facts is not None
            if node.name in state.ignored:
                out.append(0)
                continue
            labels = node.facts.labels
            score = 0.0
            keys = state.keys
            for i, c in enumerate(state.constraints):
                value = labels.get(c.topology_key)
                if value is None:
                    continue
                if c.topology_key == HOSTNAME:
                    count = count_matching(node, c.selector, pod.namespace, keys[i])
                else:
                    count = state.counts[i].get(value, 0)
                score += count * state.weights[i] + (c.max_skew - 1)
            out.append(_round(score))
        self._ignored = [n.name in state.ignored for n in nodes]
        return out

    def normalize(self, scores: list[int]) -> list[int]:
        ignored = getattr(self, "_ignored", [False] * len(scores))
        kept = [s for s, skip in zip(scores, ignored, strict=True) if not skip]
        if not kept:
            return [0] * len(scores)
        low, high = min(kept), max(kept)
        out = []
        for s, skip in zip(scores, ignored, strict=True):
            if skip:
                out.append(0)
            elif high == 0:
                out.append(MAX_NODE_SCORE)
            else:
                out.append(MAX_NODE_SCORE * (high + low - s) // high)
        return out


def _round(x: float) -> int:
    """Go's math.Round: halves away from zero."""
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))
