"""ImageLocality: prefer nodes that already hold the pod's images, weighted by image size and scaled
by how many nodes have the image (so one node holding a common image does not attract everything).

sum = Σ over the pod's containers of size * (nodes with image / all nodes), clamped to
[23 MiB, 1000 MiB * containers], then mapped linearly onto 0..100 (upstream's thresholds)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controlplane.scheduler.framework import MAX_NODE_SCORE, SKIP, ClusterView
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def image_priority(sum_scores: int, containers: int) -> int:
    max_threshold = MAX_CONTAINER_THRESHOLD * containers
    clamped = min(max(sum_scores, MIN_THRESHOLD), max_threshold)
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


class ImageLocality:
    name = "ImageLocality"

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        if cluster.total_nodes == 0 or not any(cluster.image_nodes.get(i, 0) > 0 for i in pod.images):
            return SKIP  # no node has any of its images: every node would score 0
        return cluster

    def score(self, pod: PodInfo, node: NodeInfo, cluster: ClusterView) -> int:
        assert node.facts is not None
        have = node.facts.images
        total = 0
        for image in pod.images:
            size = have.get(image)
            if size is not None:
                total += int(size * (cluster.image_nodes[image] / cluster.total_nodes))
        return image_priority(total, len(pod.images))

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        return [self.score(pod, n, state) for n in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        return scores
