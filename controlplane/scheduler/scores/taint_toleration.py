"""TaintToleration (score): fewer untolerated PreferNoSchedule taints is better. The raw score counts
them; normalization reverses it so the node with the most such taints gets 0 and clean nodes 100."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import SKIP, ClusterView, normalize_to_max
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.taints import PREFER_NO_SCHEDULE, Toleration, tolerated


class TaintTolerationScore:
    name = "TaintToleration"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        if not cluster.any_taints or not any(n.facts is not None and n.facts.soft_taints for n in nodes):
            return SKIP  # no PreferNoSchedule taint anywhere: all nodes score the same
        # Only tolerations that can apply to PreferNoSchedule count, as upstream filters them.
        return tuple(t for t in pod.tolerations if t.effect in ("", PREFER_NO_SCHEDULE))

    def score(self, node: NodeInfo, tolerations: tuple[Toleration, ...]) -> int:
        assert node.facts is not None
        return sum(1 for taint in node.facts.soft_taints if not tolerated(taint, tolerations))

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        return [self.score(n, state) for n in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        return normalize_to_max(scores, reverse=True)
