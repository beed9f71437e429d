"""NodeAffinity (score): the sum of the weights of the preferred node affinity terms a node matches,
normalized so the best node gets 100."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import SKIP, ClusterView, normalize_to_max
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo


class NodeAffinityScore:
    name = "NodeAffinity"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        return None if pod.preferred_terms else SKIP

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        assert node.facts is not None
        labels = node.facts.labels
        return sum(
            weight for weight, term in pod.preferred_terms if weight and term.matches(labels, node.name)
        )

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        return [self.score(pod, n) for n in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        return normalize_to_max(scores)
