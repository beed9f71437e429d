"""NodeResourcesFit (score): LeastAllocated spreads load, MostAllocated packs it (bin packing),
RequestedToCapacityRatio scores utilization along a shape the profile draws.

Per resource, with `requested` = what the node's pods request (cpu/memory counted with the non-zero
defaults, 100m/200Mi for a container that requests nothing) plus this pod:
  LeastAllocated: (allocatable - requested) * 100 / allocatable   (0 when it would not fit)
  MostAllocated:  min(requested, allocatable) * 100 / allocatable
  RequestedToCapacityRatio: the shape's broken line at requested * 100 / allocatable (at 100 when it
    would not fit), the shape's 0-10 scores scaled to 0-100; a resource scoring 0 is left out of the mean
The node's score is the weighted mean over the configured resources (default cpu and memory, weight 1),
as upstream's scorers take it: a resource the node has none of is left out, and so is an extended
resource the pod does not request (upstream's calculateResourceAllocatableRequest); integer division,
except RequestedToCapacityRatio's mean, which rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, ClusterView, plugin_key
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)
MAX_UTILIZATION = 100
MAX_CUSTOM_PRIORITY_SCORE = 10  # a shape's scores are 0-10, scaled to the node score's 0-100
# Resources scored as "scalar" upstream (schedutil.IsScalarResourceName) are the ones not named here:
# extended, hugepages-*, attachable volumes; a pod that does not request one is not scored on it.
_NATIVE = frozenset({"cpu", "memory", "ephemeral-storage"})


def least_requested(requested: int, allocatable: int) -> int:
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def most_requested(requested: int, allocatable: int) -> int:
    if allocatable == 0:
        return 0
    return min(requested, allocatable) * MAX_NODE_SCORE // allocatable


_PER_RESOURCE: dict[str, Callable[[int, int], int]] = {
    LEAST_ALLOCATED: least_requested,
    MOST_ALLOCATED: most_requested,
}


def _go_div(a: int, b: int) -> int:
    """Go's integer division, which truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def broken_linear(shape: Sequence[tuple[int, int]]) -> Callable[[int], int]:
    """Upstream's BuildBrokenLinearFunction over (utilization, score) points sorted by utilization:
    the first score before the first point, the last after the last, straight lines between."""
    points = tuple(shape)

    def at(p: int) -> int:
        for i, (utilization, score) in enumerate(points):
            if p <= utilization:
                if i == 0:
                    return points[0][1]
                u0, s0 = points[i - 1]
                return s0 + _go_div((score - s0) * (p - u0), utilization - u0)
        return points[-1][1]

    return at


def ratio_scorer(shape: Sequence[tuple[int, int]]) -> Callable[[int, int], int]:
    """One resource's RequestedToCapacityRatio score (0-100) for (requested, allocatable)."""
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    raw = broken_linear([(u, s * scale) for u, s in shape])

    def score(requested: int, allocatable: int) -> int:
        if allocatable == 0 or requested > allocatable:
            return raw(MAX_UTILIZATION)
        return raw(requested * MAX_UTILIZATION // allocatable)

    return score


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
        shape: Sequence[tuple[int, int]] = (),
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown scoring strategy {strategy!r} ({', '.join(STRATEGIES)})")
        if strategy == REQUESTED_TO_CAPACITY_RATIO and not shape:
            raise ValueError("RequestedToCapacityRatio needs a shape of at least one point")
        self.strategy = strategy
        self.resources = tuple((r, w) for r, w in resources if w > 0)
        self.weight_sum = sum(w for _, w in self.resources)
        self._ratio = strategy == REQUESTED_TO_CAPACITY_RATIO
        self._fn: Callable[[int, int], int] = ratio_scorer(shape) if self._ratio else _PER_RESOURCE[strategy]
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
        ratio = self._ratio
        # Extended resources the pod does not request are not scored (the same for every node).
        scored = [(r, w) for r, w in resources if r in _NATIVE or pod.requests.get(r, 0)]
        out: list[int] = []
        for node in nodes:
            assert node.facts is not None
            alloc = node.facts.allocatable
            total = weights = 0
            for resource, weight in scored:
                allocatable = alloc.get(resource, 0)
                if allocatable == 0:
                    continue
                score = fn(node_requested(pod, node, resource), allocatable)
                if ratio and score <= 0:
                    continue  # upstream's ratio scorer counts only resources that score
                total += score * weight
                weights += weight
            if not weights:
                out.append(0)
            elif ratio:
                out.append(math.floor(total / weights + 0.5))  # Go's math.Round of a positive mean
            else:
                out.append(total // weights)
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
            weights = weight_sum
            if not (cpu and memory):  # a resource the node has none of is left out of the mean
                weights = (cpu_weight if cpu else 0) + (memory_weight if memory else 0)
            score = node.by_requests[key] = total // weights if weights else 0
        out.append(score)
    return out
