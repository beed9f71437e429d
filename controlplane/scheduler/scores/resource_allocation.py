"""NodeResourcesFit (score): LeastAllocated spreads load, MostAllocated packs it (bin packing).

Per resource, with `requested` = what the node's pods request (cpu/memory counted with the non-zero
defaults, 100m/200Mi for a container that requests nothing) plus this pod:
  LeastAllocated: (allocatable - requested) * 100 / allocatable   (0 when it would not fit)
  MostAllocated:  min(requested, allocatable) * 100 / allocatable
The node's score is the weighted mean over the configured resources (default cpu and memory, weight 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, ClusterView, plugin_key
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"


def least_requested(requested: int, allocatable: int) -> int:
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def most_requested(requested: int, allocatable: int) -> int:
    if allocatable == 0:
        return 0
    return min(requested, allocatable) * MAX_NODE_SCORE // allocatable


def node_requested(pod: PodInfo, node: NodeInfo, resource: str) -> int:
    """What the node would request of `resource` with the pod on it (scoring's non-zero view)."""
    if resource == "cpu":
        return node.nonzero_cpu + pod.nonzero_cpu
    if resource == "memory":
        return node.nonzero_memory + pod.nonzero_memory
    return node.requested.get(resource, 0) + pod.requests.get(resource, 0)


class ResourceAllocation:
    name = "NodeResourcesFit"

    def __init__(
        self,
        strategy: str = LEAST_ALLOCATED,
        resources: Sequence[tuple[str, int]] = (("cpu", 1), ("memory", 1)),
    ) -> None:
        if strategy not in (LEAST_ALLOCATED, MOST_ALLOCATED):
            raise ValueError(f"unknown scoring strategy {strategy!r} (LeastAllocated or MostAllocated)")
        self.strategy = strategy
        self.resources = tuple((r, w) for r, w in resources if w > 0)
        self.weight_sum = sum(w for _, w in self.resources)
        self._fn = least_requested if strategy == LEAST_ALLOCATED else most_requested
        self.key = plugin_key()

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        return None

    def score(self, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_all(pod, [node], None)[0]

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        if not self.weight_sum:
            return [0] * len(nodes)
        fn, resources, weight_sum = self._fn, self.resources, self.weight_sum
        if fn is least_requested and [r for r, _ in resources] == ["cpu", "memory"]:
            key = f"{self.key}:{pod.requests_id}"
            return _least_cpu_memory(pod, nodes, resources[0][1], resources[1][1], weight_sum, key)
        out: list[int] = []
        for node in nodes:
            assert node.facts is not None
            alloc = node.facts.allocatable
            total = 0
            for resource, weight in resources:
                total += fn(node_requested(pod, node, resource), alloc.get(resource, 0)) * weight
            out.append(total // weight_sum)
        return out

    def normalize(self, scores: list[int]) -> list[int]:
        return scores


def _least_cpu_memory(
    pod: PodInfo, nodes: Sequence[NodeInfo], cpu_weight: int, memory_weight: int, weight_sum: int, key: str
) -> list[int]:
    """The default case (LeastAllocated over cpu and memory) unrolled: `least_requested` of each
    resource's non-zero request inlined, as this loop runs for every feasible node; each node's score
    is remembered under `key` (this plugin and the pod's requests) until the node changes."""
    pod_cpu, pod_memory = pod.nonzero_cpu, pod.nonzero_memory
    out: list[int] = []
    for node in nodes:
        score = node.by_requests.get(key)
        if score is None:
            alloc = node.facts.allocatable  # type: ignore[union-attr]
            cpu, memory = alloc.get("cpu", 0), alloc.get("memory", 0)
            want_cpu, want_memory = node.nonzero_cpu + pod_cpu, node.nonzero_memory + pod_memory
            total = 0
            if cpu and want_cpu <= cpu:
                total += (cpu - want_cpu) * MAX_NODE_SCORE // cpu * cpu_weight
            if memory and want_memory <= memory:
                total += (memory - want_memory) * MAX_NODE_SCORE // memory * memory_weight
            score = node.by_requests[key] = total // weight_sum
        out.append(score)
    return out
