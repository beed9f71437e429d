"""DefaultPreemption (PostFilter), the decision half: when no node fits, which node to free and which
pods to evict there, as upstream 1.32 decides it. Pure: the scheduler carries out the choice.

A node is a candidate only if every reason it was rejected for is one eviction can remove (resources,
host ports, anti-affinity, topology skew; upstream's Unschedulable, not UnschedulableAndUnresolvable).
On a candidate, every pod of lower priority is removed; if the pod still does not fit, the node is out.
Then pods are given back, most important first (PodDisruptionBudget-violating ones before the rest),
as long as the pod still fits: what cannot be given back are the victims. Among candidates the node
with the fewest PDB violations wins, then the lowest highest-victim priority, the smallest priority
sum, the fewest victims, the latest start of the highest-priority victims. Without a candidate the
reason is upstream's `preemption: 0/N nodes are available: ...` suffix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.scheduler.algorithm import fit_message
from controlplane.scheduler.filters.inter_pod_affinity import (
    ANTI_AFFINITY_REASON,
    EXISTING_ANTI_AFFINITY_REASON,
)
from controlplane.scheduler.filters.node_ports import REASON as PORTS_REASON
from controlplane.scheduler.filters.node_resources_fit import TOO_MANY_PODS
from controlplane.scheduler.filters.pod_topology_spread import REASON as SPREAD_REASON
from controlplane.scheduler.framework import ClusterView, FilterPlugin
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.volumelimits import MAX_VOLUME_COUNT
from controlplane.scheduler.volumerestrictions import DISK_CONFLICT, RWOP_CONFLICT
from kubeclient.selectors import Selector

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
POLICY_NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING_ON_NOMINATED = "not eligible due to a terminating pod on the nominated node."
_RESOLVABLE = frozenset(
    {
        TOO_MANY_PODS,
        PORTS_REASON,
        ANTI_AFFINITY_REASON,
        EXISTING_ANTI_AFFINITY_REASON,
        SPREAD_REASON,
        MAX_VOLUME_COUNT,
        DISK_CONFLICT,
        RWOP_CONFLICT,
    }
)
MIN_CANDIDATES_PERCENT, MIN_CANDIDATES = 10, 100
_PRIORITY_OFFSET = 2**31  # upstream adds MaxInt32 + 1 so that the sums compare as non-negative


def resolvable(reasons: Sequence[str]) -> bool:
    return bool(reasons) and all(r in _RESOLVABLE or r.startswith("Insufficient ") for r in reasons)


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as preemption reads it."""

    namespace: str
    selector: Selector
    allowed: int
    disrupted: frozenset[str] = frozenset()


@dataclass
class Candidate:
    node: NodeInfo
    victims: list[PodInfo]
    violations: int = 0


@dataclass
class Outcome:
    candidate: Candidate | None
    message: str = ""  # the PostFilter message when there is no candidate
    statuses: dict[str, tuple[str, ...]] = field(default_factory=dict)


def more_important(pod: PodInfo) -> tuple[int, str]:
    """Sort key: higher priority first, then the earlier started."""
    return (-pod.priority, pod.start_time or "~")


def eligible(pod: PodInfo, nodes: dict[str, NodeInfo], rejected: dict[str, tuple[str, ...]]) -> str:
    """Upstream's PodEligibleToPreemptOthers: "" if the pod may preempt, else why not."""
    if pod.preempt_never:
        return POLICY_NEVER
    nominated = nodes.get(pod.nominated_node) if pod.nominated_node else None
    if nominated is not None and resolvable(rejected.get(nominated.name, ())):
        if any(p.deleting and p.priority < pod.priority for p in nominated.pods.values()):
            return TERMINATING_ON_NOMINATED
    return ""


class Trial:
    """Preemption's what-if on one candidate node: a copy of the node, and the filters' PreFilter state
    (computed once for the pod) kept in step as pods are taken off and given back, through the filters'
    add_pod/remove_pod extensions, as upstream's SelectVictimsOnNode does, instead of recounting the
    cluster for every check."""

    def __init__(
        self,
        pod: PodInfo,
        node: NodeInfo,
        filters: Sequence[FilterPlugin],
        nominated: Sequence[PodInfo] = (),
    ) -> None:
        self.pod = pod
        self.node = node.copy()
        self.filters = [f for f in filters if f.applies(pod)]
        self.extensions = [f for f in self.filters if hasattr(f, "add_pod")]
        # Pods preemption already nominated to this node, at least as important: the room freed for
        # them is not this pod's (upstream's RunFilterPluginsWithNominatedPods).
        self.nominated = [
            p for p in nominated if p.uid != pod.uid and p.priority >= pod.priority and p.uid not in node.pods
        ]

    def remove(self, other: PodInfo) -> None:
        self.node.remove_pod(other.uid)
        for f in self.extensions:
            f.remove_pod(self.pod, other, self.node)  # type: ignore[attr-defined]

    def add(self, other: PodInfo) -> None:
        self.node.add_pod(other)
        for f in self.extensions:
            f.add_pod(self.pod, other, self.node)  # type: ignore[attr-defined]

    def fits(self) -> tuple[str, ...]:
        """The filters' verdict with the nominated pods on the node, then (as upstream) without them."""
        if self.nominated:
            for p in self.nominated:
                self.add(p)
            try:
                reasons = self._filter()
            finally:
                for p in self.nominated:
                    self.remove(p)
            if reasons:
                return reasons
        return self._filter()

    def _filter(self) -> tuple[str, ...]:
        for f in self.filters:
            reasons = f.filter(self.pod, self.node)
            if reasons:
                return reasons
        return ()


class SavedStates:
    """The pod's PreFilter states, restored (as copies) before each candidate node is tried."""

    def __init__(self, pod: PodInfo, filters: Sequence[FilterPlugin]) -> None:
        self.pod = pod
        self.saved = [(f, f.save()) for f in filters if f.applies(pod) and hasattr(f, "save")]  # type: ignore[attr-defined]

    def restore(self) -> None:
        for f, state in self.saved:
            f.restore(state, self.pod)  # type: ignore[attr-defined]


def violating(victims: Sequence[PodInfo], budgets: Sequence[Budget]) -> set[str]:
    """The victims whose eviction would take some PDB below its allowed disruptions."""
    allowed = [b.allowed for b in budgets]
    out: set[str] = set()
    for pod in victims:
        for i, b in enumerate(budgets):
            if b.namespace != pod.namespace or b.selector.empty or not b.selector.matches(pod.labels):
                continue
            if pod.name in b.disrupted:
                continue
            allowed[i] -= 1
            if allowed[i] < 0:
                out.add(pod.uid)
    return out


def select_victims(
    pod: PodInfo,
    node: NodeInfo,
    filters: Sequence[FilterPlugin],
    budgets: Sequence[Budget],
    nominated: Sequence[PodInfo] = (),
) -> tuple[Candidate | None, tuple[str, ...]]:
    potential = [p for p in node.pods.values() if p.priority < pod.priority]
    if not potential:
        return None, (NO_VICTIMS,)
    trial = Trial(pod, node, filters, nominated)
    for p in potential:
        trial.remove(p)
    reasons = trial.fits()
    if reasons:
        return None, reasons
    potential.sort(key=more_important)
    bad = violating(potential, budgets)
    victims: list[PodInfo] = []
    violations = 0
    for group, counts in (
        ([p for p in potential if p.uid in bad], True),
        ([p for p in potential if p.uid not in bad], False),
    ):
        for p in group:
            trial.add(p)
            if trial.fits():
                trial.remove(p)
                victims.append(p)
                violations += counts
    victims.sort(key=more_important)
    return Candidate(node, victims, violations), ()


def _earliest_start_of_top(victims: Sequence[PodInfo]) -> str:
    top = victims[0].priority
    return min((v.start_time or "~") for v in victims if v.priority == top)


def pick(candidates: Sequence[Candidate]) -> Candidate:
    def key(c: Candidate) -> tuple[int, int, int, int]:
        if not c.victims:
            return (c.violations, -(2**63), 0, 0)
        return (
            c.violations,
            c.victims[0].priority,
            sum(v.priority + _PRIORITY_OFFSET for v in c.victims),
            len(c.victims),
        )

    best = min(key(c) for c in candidates)
    tied = [c for c in candidates if key(c) == best]
    if len(tied) == 1 or not tied[0].victims:
        return tied[0]
    latest = max(_earliest_start_of_top(c.victims) for c in tied)
    return next(c for c in tied if _earliest_start_of_top(c.victims) == latest)


def preempt(
    pod: PodInfo,
    rejected: dict[str, tuple[str, ...]],
    filters: Sequence[FilterPlugin],
    cluster: ClusterView,
    budgets: Sequence[Budget] = (),
) -> Outcome:
    nodes = {n.name: n for n in cluster.all_nodes}
    why_not = eligible(pod, nodes, rejected)
    if why_not:
        return Outcome(None, why_not)
    statuses: dict[str, tuple[str, ...]] = {}
    potential = []
    for node in cluster.all_nodes:
        if resolvable(rejected.get(node.name, ())):
            potential.append(node)
        else:
            statuses[node.name] = (NOT_HELPFUL,)
    wanted = min(max(len(cluster.all_nodes) * MIN_CANDIDATES_PERCENT // 100, MIN_CANDIDATES), len(potential))
    states = SavedStates(pod, filters)
    candidates: list[Candidate] = []
    try:
        for node in potential:
            states.restore()
            nominated = cluster.nominated.get(node.name, ())
            candidate, reasons = select_victims(pod, node, filters, budgets, nominated)
            if candidate is None:
                statuses[node.name] = reasons
                continue
            candidates.append(candidate)
            if len(candidates) >= wanted and any(c.violations == 0 for c in candidates):
                break
    finally:
        states.restore()
    if not candidates:
        return Outcome(None, fit_message(len(cluster.all_nodes), statuses), statuses)
    return Outcome(pick(candidates))
