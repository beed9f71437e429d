"""NodeResourcesBalancedAllocation: prefer nodes whose cpu and memory would be used in equal fractions,
so neither runs out while the other idles. score = (1 - std of the fractions) * 100, fractions capped
at 1, with the actual (not non-zero) requests; skipped for pods that request nothing, as upstream does
since the best-effort fix, because it would otherwise herd them onto one node."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
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

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        if not any(pod.requests.get(r, 0) for r in self.resources):
            return SKIP
        return None

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        assert node.facts is not None
        fractions: list[float] = []
        for r in self.resources:
            alloc = node.facts.allocatable.get(r, 0)
            if alloc == 0:
                continue
            fractions.append(min((node.requested.get(r, 0) + pod.requests.get(r, 0)) / alloc, 1.0))
        return balanced_score(fractions)

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        return [self.score(pod, n) for n in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        return scores
