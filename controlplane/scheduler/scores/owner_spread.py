"""Spreading pods of one owner: fewer pods of the same controller (same namespace, same controller
ownerReference UID) on a node is better, so replicas of a ReplicaSet land on different nodes.

This is what upstream's default spreading achieves (the old SelectorSpread plugin, now
PodTopologySpread's system default on kubernetes.io/hostname), keyed on the owner instead of on the
selectors of Services and controllers, which this scheduler does not watch. Score:
100 * (most matching pods on any feasible node - matching pods here) / that maximum; 100 everywhere when
no node has one yet. Pods without a controller are not scored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo


class OwnerSpread:
    name = "OwnerSpread"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        return pod.owner if pod.owner is not None else SKIP

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        return [n.owners.get(state, 0) for n in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        top = max(scores, default=0)
        if top == 0:
            return [MAX_NODE_SCORE] * len(scores)
        return [MAX_NODE_SCORE * (top - s) // top for s in scores]
