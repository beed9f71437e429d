"""What PodTopologySpread's filter and score share: which nodes count for a constraint, and how many
matching pods each topology domain holds.

A node counts for a constraint only if it has every topology key of the pod's constraints and passes
the constraint's inclusion policies (nodeAffinityPolicy Honor: the pod's nodeSelector and required node
affinity; nodeTaintsPolicy Honor: no NoSchedule/NoExecute taint the pod does not tolerate). A pod counts
if it is in the incoming pod's namespace, matches the constraint's selector and is not terminating.
The cluster default constraints (upstream's system defaults, which replaced SelectorSpread) apply to
scoring only, for pods without constraints of their own, with the selector of the Services and
controllers that select the pod.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.scheduler.affinityterms import HONOR, IGNORE, SCHEDULE_ANYWAY, SpreadConstraint
from controlplane.scheduler.nodeinfo import NodeInfo, fits_node_affinity
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.smallids import SmallIds
from controlplane.scheduler.taints import first_untolerated
from kubeclient.selectors import Selector

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
# (topologyKey, maxSkew): upstream's system default constraints, both ScheduleAnyway.
SYSTEM_DEFAULTS = ((HOSTNAME, 3), (ZONE, 5))


def default_constraints(selector: Selector) -> tuple[SpreadConstraint, ...]:
    return tuple(SpreadConstraint(skew, key, selector, 1, HONOR, IGNORE) for key, skew in SYSTEM_DEFAULTS)


def has_all_keys(labels: Mapping[str, str], constraints: Sequence[SpreadConstraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


def node_included(pod: PodInfo, node: NodeInfo, c: SpreadConstraint) -> bool:
    assert node.facts is not None
    if c.node_affinity_policy == HONOR and not fits_node_affinity(pod, node.facts):
        return False
    if c.node_taints_policy == HONOR and first_untolerated(node.facts.taints, pod.tolerations) is not None:
        return False
    return True


selector_id = SmallIds()


def count_matching(
    node: NodeInfo, selector: Selector, namespace: str, key: tuple[str, int] | None = None
) -> int:
    """The node's pods in `namespace` matching `selector`, terminating ones left out (upstream's
    countPodsMatchSelector); remembered on the node until its pods change."""
    key = key or (namespace, selector_id(selector))
    count = node.match_counts.get(key)
    if count is None:
        count = node.match_counts[key] = sum(
            1
            for p in node.pods.values()
            if p.namespace == namespace and not p.deleting and selector.matches(p.labels)
        )
    return count


def domain_counts(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    constraints: Sequence[SpreadConstraint],
    index: SpreadIndex | None = None,
) -> list[dict[str, int]]:
    """Per constraint: topology value -> matching pods, over the nodes that count for it. With `index`
    (the cache's, over the same `nodes`), counts that no inclusion policy narrows for this pod are
    taken from it rather than walked node by node; the result is the caller's to change either way."""
    # Inclusion policies that cannot exclude a node are not checked per node.
    policies = [
        (c.node_affinity_policy == HONOR and (bool(pod.node_selector) or pod.required_terms is not None))
        or c.node_taints_policy == HONOR
        for c in constraints
    ]
    if index is None or any(policies):
        return _walk(pod, nodes, constraints, policies)
    key = index.key(pod.namespace, constraints)
    kept = index.get(key)
    if kept is None:
        kept = index.put(key, pod.namespace, constraints, _walk(pod, nodes, constraints, policies))
    return [dict(by_value) for by_value in kept]


def _walk(
    pod: PodInfo, nodes: Sequence[NodeInfo], constraints: Sequence[SpreadConstraint], policies: list[bool]
) -> list[dict[str, int]]:
    counts: list[dict[str, int]] = [{} for _ in constraints]
    keys = [(pod.namespace, selector_id(c.selector)) for c in constraints]
    topology_keys = [c.topology_key for c in constraints]
    first_key = topology_keys[0] if len(topology_keys) == 1 else None
    for node in nodes:
        assert node.facts is not None
        labels = node.facts.labels
        if first_key is not None:
            if first_key not in labels:
                continue
        elif not all(k in labels for k in topology_keys):
            continue
        memo = node.match_counts
        for i, c in enumerate(constraints):
            if policies[i] and not node_included(pod, node, c):
                continue
            value = labels[topology_keys[i]]
            matching = memo.get(keys[i])
            if matching is None:
                matching = count_matching(node, c.selector, pod.namespace, keys[i])
            by_value = counts[i]
            by_value[value] = by_value.get(value, 0) + matching
    return counts


IndexKey = tuple[str, tuple[tuple[int, str], ...]]


@dataclass
class KeptCounts:
    """One constraint set's domain counts in one namespace, as `_walk` would give them without
    inclusion policies: a node counts if it has every topology key of the set."""

    namespace: str
    topology_keys: tuple[str, ...]
    selectors: tuple[Selector, ...]
    counts: list[dict[str, int]]

    def follow(self, pod: PodInfo, labels: Mapping[str, str], delta: int) -> None:
        if pod.namespace != self.namespace or pod.deleting:
            return
        if not all(k in labels for k in self.topology_keys):
            return
        for selector, key, by_value in zip(self.selectors, self.topology_keys, self.counts, strict=True):
            if selector.matches(pod.labels):
                value = labels[key]
                by_value[value] = by_value.get(value, 0) + delta


class SpreadIndex:
    """PodTopologySpread's domain counts kept across decisions, so that a pod of a workload already
    counted costs the constraints, not the nodes: filled by one walk of the nodes the first time a
    (namespace, constraint set) is asked for, then changed by every pod the cache places or takes
    off a node (`follow`), and dropped when a node comes, goes or is relabelled. The least recently
    asked for beyond `size` are forgotten, as each one costs a little on every placement."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._kept: OrderedDict[IndexKey, KeptCounts] = OrderedDict()

    def key(self, namespace: str, constraints: Sequence[SpreadConstraint]) -> IndexKey:
        return namespace, tuple((selector_id(c.selector), c.topology_key) for c in constraints)

    def get(self, key: IndexKey) -> list[dict[str, int]] | None:
        kept = self._kept.get(key)
        if kept is None:
            return None
        self._kept.move_to_end(key)
        return kept.counts

    def put(
        self,
        key: IndexKey,
        namespace: str,
        constraints: Sequence[SpreadConstraint],
        counts: list[dict[str, int]],
    ) -> list[dict[str, int]]:
        """Keep `counts` (copied) for `key`; returns the kept copy."""
        kept = [dict(by_value) for by_value in counts]
        self._kept[key] = KeptCounts(
            namespace,
            tuple(c.topology_key for c in constraints),
            tuple(c.selector for c in constraints),
            kept,
        )
        if len(self._kept) > self.size:
            self._kept.popitem(last=False)
        return kept

    def follow(self, pod: PodInfo, node: NodeInfo, delta: int) -> None:
        """`pod` placed on (1) or taken off (-1) `node`, a node that exists as an object."""
        if not self._kept or node.facts is None:
            return
        labels = node.facts.labels
        for kept in self._kept.values():
            kept.follow(pod, labels, delta)

    def clear(self) -> None:
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


__all__ = [
    "SCHEDULE_ANYWAY",
    "SpreadIndex",
    "default_constraints",
    "domain_counts",
    "has_all_keys",
    "node_included",
]
