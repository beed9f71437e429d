"""The scheduler's picture of the cluster: nodes and every pod committed to one.

A pod is committed the moment the scheduler picks a node for it ("assumed"), before the binding is
even sent, so the next pod already sees the slot taken: two pods never race for one last slot. The
pod watch later confirms the assumption (the pod shows up with spec.nodeName); a failed bind forgets
it. Counts of nodes holding each image are kept here because ImageLocality scales by spread.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.nodeinfo import NodeFacts, NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.topologyspread import SpreadIndex


class SchedulerCache:
    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_node: dict[str, str] = {}  # pod uid -> node name
        self._assumed: set[str] = set()
        self.image_nodes: Counter[str] = Counter()  # image -> number of nodes that have it
        self._schedulable: list[NodeInfo] | None = None
        # The nodes holding pods with inter-pod affinity terms, and those holding pods with required
        # anti-affinity (upstream's HavePodsWithAffinityNodeInfoList and ...RequiredAntiAffinity...):
        # InterPodAffinity walks only these for a pod without terms of its own.
        self._with_affinity: dict[str, NodeInfo] = {}
        self._with_anti: dict[str, NodeInfo] = {}
        self._listed: dict[str, list[NodeInfo]] = {}
        self.spread_index = SpreadIndex()  # PodTopologySpread's domain counts, kept as pods move
        # The nodes with any taint and the unschedulable ones: while there are none, TaintToleration's
        # and NodeUnschedulable's filters pass every node and need not be asked node by node.
        self._tainted: set[str] = set()
        self._unschedulable: set[str] = set()

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
        info.by_requests = {}  # allocatable may have changed
        _mark(self._tainted, facts.name, bool(facts.taints))
        _mark(self._unschedulable, facts.name, facts.unschedulable)
        if old is None:
            self._schedulable = None
            self._listed.clear()
        if old is None or old.labels != facts.labels:
            self.spread_index.clear()
        return old, facts

    def remove_node(self, name: str) -> None:
        info = self._nodes.get(name)
        if info is None or info.facts is None:
            return
        self.image_nodes.subtract(info.facts.images.keys())
        info.facts = None
        self._tainted.discard(name)
        self._unschedulable.discard(name)
        if not info.pods:
            del self._nodes[name]
        self._schedulable = None
        self._listed.clear()
        self.spread_index.clear()

    def nodes(self) -> list[NodeInfo]:
        """Nodes that exist as objects, in a stable order (by name)."""
        if self._schedulable is None:
            self._schedulable = sorted(
                (n for n in self._nodes.values() if n.facts is not None), key=lambda n: n.name
            )
        return self._schedulable

    def cluster_view(self, **more: Any) -> ClusterView:
        """The existing nodes and what the cache keeps about them for one decision; `more`: the
        ClusterView fields from outside the cache (namespace labels, selectors, nominations)."""
        nodes = self.nodes()
        return ClusterView(
            len(nodes),
            self.image_nodes,
            nodes,
            affinity_nodes=self.affinity_nodes(),
            anti_affinity_nodes=self.anti_affinity_nodes(),
            spread_index=self.spread_index,
            any_taints=bool(self._tainted),
            any_unschedulable=bool(self._unschedulable),
            **more,
        )

    def affinity_nodes(self) -> list[NodeInfo]:
        """Nodes (existing as objects) holding a pod with any inter-pod affinity term."""
        return self._listing("affinity", self._with_affinity)

    def anti_affinity_nodes(self) -> list[NodeInfo]:
        """Nodes (existing as objects) holding a pod with a required anti-affinity term."""
        return self._listing("anti", self._with_anti)

    def _listing(self, kind: str, holders: dict[str, NodeInfo]) -> list[NodeInfo]:
        listed = self._listed.get(kind)
        if listed is None:
            listed = self._listed[kind] = sorted(
                (n for n in holders.values() if n.facts is not None), key=lambda n: n.name
            )
        return listed

    def _track_affinity(self, info: NodeInfo) -> None:
        """Keep `info` in (or out of) the affinity listings after its pods changed."""
        for kind, holders, holds in (
            ("affinity", self._with_affinity, bool(info.affinity_pods)),
            ("anti", self._with_anti, bool(info.anti_terms)),
        ):
            if holds != (info.name in holders):
                if holds:
                    holders[info.name] = info
                else:
                    del holders[info.name]
                self._listed.pop(kind, None)

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
        replaced = info.pods.get(pod.uid)
        if replaced is not None:
            self.spread_index.follow(replaced, info, -1)
        info.add_pod(pod)
        self.spread_index.follow(pod, info, 1)
        self._pod_node[pod.uid] = node_name
        self._track_affinity(info)

    def _unplace(self, uid: str) -> bool:
        node_name = self._pod_node.pop(uid, None)
        if node_name is None:
            return False
        info = self._nodes.get(node_name)
        if info is not None:
            gone = info.remove_pod(uid)
            if gone is not None:
                self.spread_index.follow(gone, info, -1)
            self._track_affinity(info)
            if info.facts is None and not info.pods:
                del self._nodes[node_name]
        return True


def _mark(names: set[str], name: str, member: bool) -> None:
    if member:
        names.add(name)
    else:
        names.discard(name)
