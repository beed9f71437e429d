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
from collections.abc import Hashable, Mapping, Sequence

from controlplane.scheduler.affinityterms import HONOR, IGNORE, SCHEDULE_ANYWAY, SpreadConstraint
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo, node_matches
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
    if c.node_affinity_policy == HONOR and not node_matches(pod, node.facts.labels, node.name):
        return False
    if c.node_taints_policy == HONOR and first_untolerated(node.facts.taints, pod.tolerations) is not None:
        return False
    return True


class SmallIds:
    """A small number per distinct value (a selector, an affinity term), so per-node memo keys hash
    cheaply (a frozen dataclass's hash is recomputed on every lookup); the least recently used are
    forgotten beyond `size`."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._ids: OrderedDict[Hashable, int] = OrderedDict()
        self._next = 0

    def __call__(self, value: Hashable) -> int:
        found = self._ids.get(value)
        if found is not None:
            self._ids.move_to_end(value)
            return found
        self._next += 1
        self._ids[value] = self._next
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
        return self._next


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
    pod: PodInfo, nodes: Sequence[NodeInfo], constraints: Sequence[SpreadConstraint]
) -> list[dict[str, int]]:
    """Per constraint: topology value -> matching pods, over the nodes that count for it."""
    counts: list[dict[str, int]] = [{} for _ in constraints]
    keys = [(pod.namespace, selector_id(c.selector)) for c in constraints]
    # Inclusion policies that cannot exclude a node are not checked per node.
    policies = [
        (c.node_affinity_policy == HONOR and (bool(pod.node_selector) or pod.required_terms is not None))
        or c.node_taints_policy == HONOR
        for c in constraints
    ]
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


__all__ = ["SCHEDULE_ANYWAY", "default_constraints", "domain_counts", "has_all_keys", "node_included"]
