"""NodeResourcesBalancedAllocation: prefer nodes whose cpu and memory would be used in equal fractions,
so neither runs out while the other idles. score = (1 - std of the fractions) * 100, fractions capped
at 1, with the actual (not non-zero) requests; skipped for pods that request nothing, as upstream does
since the best-effort fix, because it would otherwise herd them onto one node."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView, plugin_key
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo


def balanced_score(fractions: Sequence[float]) -> int:
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * MAX_NODE_SCORE)


class BalancedAllocation:
    name = "NodeResourcesBalancedAllocation"

    def __init__(self, resources: Sequence[str] = ("cpu", "memory")) -> None:
        self.resources = tuple(resources)
        self.key = plugin_key()

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        if not any(pod.requests.get(r, 0) for r in self.resources):
            return SKIP
        return None

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_all(pod, [node], None)[0]

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        wanted = [(r, pod.requests.get(r, 0)) for r in self.resources]
        if len(wanted) == 2:
            return _two_resources(wanted[0], wanted[1], nodes, f"{self.key}:{pod.requests_id}")
        out: list[int] = []
        for node in nodes:
            assert node.facts is not None
            alloc, used = node.facts.allocatable, node.requested
            fractions: list[float] = []
            for r, want in wanted:
                a = alloc.get(r, 0)
                if a:
                    f = (used.get(r, 0) + want) / a
                    fractions.append(f if f < 1.0 else 1.0)
            out.append(balanced_score(fractions))
        return out

    def normalize(self, scores: list[int]) -> list[int]:
        return scores


def _two_resources(
    first: tuple[str, int], second: tuple[str, int], nodes: Sequence[NodeInfo], key: str
) -> list[int]:
    """The default case (cpu and memory) unrolled: the same arithmetic as `balanced_score` of the
    two fractions, without building them per node (this loop runs for every feasible node); each
    node's score is remembered under `key` (this plugin and the pod's requests) until it changes."""
    (r1, want1), (r2, want2) = first, second
    out: list[int] = []
    for node in nodes:
        score = node.by_requests.get(key)
        if score is None:
            alloc, used = node.facts.allocatable, node.requested  # type: ignore[union-attr]
            a1, a2 = alloc.get(r1, 0), alloc.get(r2, 0)
            if a1 and a2:
                f1 = (used.get(r1, 0) + want1) / a1
                f2 = (used.get(r2, 0) + want2) / a2
                std = abs((f1 if f1 < 1.0 else 1.0) - (f2 if f2 < 1.0 else 1.0)) / 2
                score = int((1 - std) * MAX_NODE_SCORE)
            else:
                score = MAX_NODE_SCORE  # one fraction or none: no spread
            node.by_requests[key] = score
        out.append(score)
    return out
