"""The scheduler's picture of the cluster: nodes and every pod committed to one.

A pod is committed the moment the scheduler picks a node for it ("assumed"), before the binding is
even sent, so the next pod already sees the slot taken: two pods never race for one last slot. The
pod watch later confirms the assumption (the pod shows up with spec.nodeName); a failed bind forgets
it. Counts of nodes holding each image are kept here because ImageLocality scales by spread.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controlplane.scheduler.nodeinfo import NodeFacts, NodeInfo
from controlplane.scheduler.podinfo import PodInfo


class SchedulerCache:
    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_node: dict[str, str] = {}  # pod uid -> node name
        self._assumed: set[str] = set()
        self.image_nodes: Counter[str] = Counter()  # image -> number of nodes that have it
        self._schedulable: list[NodeInfo] | None = None

    def sizes(self) -> dict[str, int]:
        """scheduler_scheduler_cache_size: nodes, pods placed on them, and those of them only assumed."""
        return {"nodes": len(self._nodes), "pods": len(self._pod_node), "assumed_pods": len(self._assumed)}

    # nodes -------------------------------------------------------------------------------------------
    def set_node(self, node: dict[str, Any]) -> tuple[NodeFacts | None, NodeFacts]:
        """Add or update a node; returns (old facts, new facts) so callers can tell what changed."""
        facts = NodeFacts.from_node(node)
        info = self._nodes.get(facts.name)
        if info is None:
            info = self._nodes[facts.name] = NodeInfo(facts.name)
        old = info.facts
        if old is not None:
            self.image_nodes.subtract(old.images.keys())
        self.image_nodes.update(facts.images.keys())
        info.facts = facts
        self._schedulable = None
        return old, facts

    def remove_node(self, name: str) -> None:
        info = self._nodes.get(name)
        if info is None or info.facts is None:
            return
        self.image_nodes.subtract(info.facts.images.keys())
        info.facts = None
        if not info.pods:
            del self._nodes[name]
        self._schedulable = None

    def nodes(self) -> list[NodeInfo]:
        """Nodes that exist as objects, in a stable order (by name)."""
        if self._schedulable is None:
            self._schedulable = sorted(
                (n for n in self._nodes.values() if n.facts is not None), key=lambda n: n.name
            )
        return self._schedulable

    def node(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    # pods --------------------------------------------------------------------------------------------
    def assume(self, pod: PodInfo, node_name: str) -> None:
        self._place(pod, node_name)
        self._assumed.add(pod.uid)

    def forget(self, uid: str) -> None:
        """Undo an assumption whose binding failed."""
        if uid in self._assumed:
            self._assumed.discard(uid)
            self._unplace(uid)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def set_pod(self, pod: PodInfo) -> None:
        """A bound, non-terminal pod seen through the watch (confirms an assumption)."""
        self._assumed.discard(pod.uid)
        self._place(pod, pod.node_name)

    def remove_pod(self, uid: str) -> bool:
        """A pod left its node (deleted or finished); True if it was holding resources."""
        self._assumed.discard(uid)
        return self._unplace(uid)

    def placed(self, uid: str) -> PodInfo | None:
        """The pod as the cache holds it on its node, if it is placed."""
        node = self._pod_node.get(uid)
        info = self._nodes.get(node) if node is not None else None
        return info.pods.get(uid) if info is not None else None

    def has_pod(self, uid: str) -> bool:
        return uid in self._pod_node

    def pod_node(self, uid: str) -> str | None:
        return self._pod_node.get(uid)

    def _place(self, pod: PodInfo, node_name: str) -> None:
        current = self._pod_node.get(pod.uid)
        if current is not None and current != node_name:
            self._unplace(pod.uid)
        info = self._nodes.get(node_name)
        if info is None:
            info = self._nodes[node_name] = NodeInfo(node_name)
        info.add_pod(pod)
        self._pod_node[pod.uid] = node_name

    def _unplace(self, uid: str) -> bool:
        node_name = self._pod_node.pop(uid, None)
        if node_name is None:
            return False
        info = self._nodes.get(node_name)
        if info is not None:
            info.remove_pod(uid)
            if info.facts is None and not info.pods:
                del self._nodes[node_name]
        return True
