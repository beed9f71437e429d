"""One scheduling decision: filter every node, score the feasible ones, pick the best.

Pure and synchronous (no I/O), so it is unit-testable with hand-built nodes and never yields the event
loop halfway through a decision, which is what keeps the assumed-pod bookkeeping race-free.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.scheduler.framework import (
    SKIP,
    SKIP_STATUS,
    UNOBSERVED,
    UNRESOLVABLE_STATUS,
    ClusterView,
    FilterPlugin,
    Observer,
    ScorePlugin,
)
from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo

NO_NODES = "no nodes available to schedule pods"


@dataclass
class FitError(Exception):
    """No node fits. `reasons` maps node name -> the first failing filter's reasons."""

    num_nodes: int
    reasons: dict[str, tuple[str, ...]]
    pre_filter: str = ""  # a PreFilter's verdict on the pod, whatever the node
    post_filter: str = ""  # preemption's verdict when it found nothing to evict
    # The plugins that rejected the pod somewhere: only cluster events these plugins care about send
    # it back to the queue (upstream's queueing hints).
    plugins: frozenset[str] = frozenset()

    def __str__(self) -> str:
        if self.pre_filter and self.num_nodes:
            message = f"0/{self.num_nodes} nodes are available: {self.pre_filter}."
        else:
            message = fit_message(self.num_nodes, self.reasons)
        # Upstream appends each part as " %v." (FitError.Error, SeparatorFormat), and preemption's part
        # ends with its own period: hence kube-scheduler's "..." incoming pod.." endings.
        return f"{message} {self.post_filter}." if self.post_filter else message


def fit_message(num_nodes: int, reasons: dict[str, tuple[str, ...]]) -> str:
    """Upstream's FitError text: `0/N nodes are available: <count> <reason>, ....` with the
    "<count> <reason>" strings sorted as strings (so "10 x" sorts before "2 y", as upstream's does)."""
    if num_nodes == 0:
        return NO_NODES
    histogram: Counter[str] = Counter()
    for node_reasons in reasons.values():
        histogram.update(node_reasons)
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{num_nodes} nodes are available:"
    if parts:
        message += f" {', '.join(parts)}."
    return message


@dataclass(frozen=True)
class WeightedScore:
    plugin: ScorePlugin
    weight: int


MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE = 5


def feasible_nodes_to_find(num_nodes: int, percentage: int = 0) -> int:
    """Upstream's percentageOfNodesToScore: in a big cluster, stop filtering once this many nodes fit
    (all of them below 100 nodes; by default 50% minus 1% per 125 nodes, at least 5% and 100 nodes)."""
    if num_nodes < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
        return num_nodes
    if percentage <= 0:
        percentage = max(50 - num_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    return max(num_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass
class Search:
    """Where the next pod's node search starts: upstream rotates it so that stopping early does not
    always favour the first nodes in the list."""

    percentage: int = 0
    next_start: int = 0


def with_nominated(pod: PodInfo, node: NodeInfo, cluster: ClusterView | None) -> NodeInfo:
    """The node as a pod sees it: plus the pods nominated to it (by preemption) that are at least as
    important, so it does not take the room freed for them (upstream's RunFilterPluginsWithNominatedPods)."""
    if cluster is None or node.name not in cluster.nominated:
        return node
    extra = [p for p in cluster.nominated[node.name] if p.uid != pod.uid and p.priority >= pod.priority]
    if not extra:
        return node
    trial = node.copy()
    for p in extra:
        trial.add_pod(p)
    return trial


def find_feasible(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    filters: Sequence[FilterPlugin],
    search: Search | None = None,
    cluster: ClusterView | None = None,
    rejectors: set[str] | None = None,
    observer: Observer = UNOBSERVED,
) -> tuple[list[NodeInfo], dict[str, tuple[str, ...]]]:
    # Upstream's PreFilter "Skip": a filter with nothing to check for this pod is not run per node.
    filters = [f for f in filters if f.applies(pod)]
    timed = [_TimedFilter(f) for f in filters] if observer.sampled else []
    if timed:
        filters = timed
    elif cluster is not None:  # nor, unless timed, one that passes every node anyway
        filters = [f for f in filters if not _idle(f, pod, cluster)]
    feasible: list[NodeInfo] = []
    rejected: dict[str, tuple[str, ...]] = {}
    total = len(nodes)
    limit = feasible_nodes_to_find(total, search.percentage) if search else total
    start = search.next_start % total if search and total else 0
    processed = 0
    nominations = cluster if cluster is not None and cluster.nominated else None
    checks = [(f.name, f.filter) for f in filters]  # bound once: this loop runs per node and filter
    for i in range(total):
        node = nodes[(start + i) % total]
        processed += 1
        seen = with_nominated(pod, node, nominations) if nominations is not None else node
        for name, check in checks:
            reasons = check(pod, seen)
            if reasons:
                rejected[node.name] = reasons
                if rejectors is not None:
                    rejectors.add(name)
                break
        else:
            feasible.append(node)
            if len(feasible) >= limit:
                break
    if search is not None and total:
        search.next_start = (start + processed) % total
    for f in timed:
        f.report(observer)
    return feasible, rejected


def _idle(f: FilterPlugin, pod: PodInfo, cluster: ClusterView) -> bool:
    idle = getattr(f, "idle", None)
    return idle is not None and bool(idle(pod, cluster))


@dataclass
class _TimedFilter:
    """A filter whose every call is timed (sampled cycles only); the durations, by outcome, go to the
    cycle's observer together once the nodes are filtered, as a call's own reporting would cost several
    times the call."""

    inner: FilterPlugin
    took: dict[tuple[str, ...], list[float]] = field(default_factory=dict)  # reasons -> durations

    @property
    def name(self) -> str:
        return self.inner.name

    def applies(self, pod: PodInfo) -> bool:
        return self.inner.applies(pod)

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        started = time.perf_counter()
        reasons = self.inner.filter(pod, node)
        seconds = time.perf_counter() - started
        durations = self.took.get(reasons)
        if durations is None:
            durations = self.took[reasons] = []
        durations.append(seconds)
        return reasons

    def report(self, observer: Observer) -> None:
        for reasons, durations in self.took.items():
            observer.plugin_calls(self.inner.name, "Filter", reasons, durations)
        self.took = {}


def score_nodes(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    scores: Sequence[WeightedScore],
    cluster: ClusterView,
    observer: Observer = UNOBSERVED,
) -> list[int]:
    """Upstream's PreScore (each plugin's `prepare`) then Score (`score_all` and `normalize`, timed as
    one call per plugin over all nodes) and the weighted sum."""
    totals = [0] * len(nodes)
    sampled = observer.sampled
    states = []
    started = time.perf_counter()
    for ws in scores:
        if ws.weight <= 0:
            continue
        begun = time.perf_counter()
        state = ws.plugin.prepare(pod, nodes, cluster)
        if sampled:
            skipped = state is SKIP
            observer.plugin(ws.plugin.name, "PreScore", SKIP_STATUS if skipped else (), _since(begun))
        if state is not SKIP:
            states.append((ws, state))
    scored = time.perf_counter()
    for ws, state in states:
        begun = time.perf_counter()
        raw = ws.plugin.score_all(pod, nodes, state)
        weight = ws.weight
        totals = [t + s * weight for t, s in zip(totals, ws.plugin.normalize(raw), strict=True)]
        if sampled:
            observer.plugin(ws.plugin.name, "Score", (), _since(begun))
    observer.point("PreScore", (), scored - started)
    observer.point("Score", (), _since(scored))
    return totals


def _since(started: float) -> float:
    return time.perf_counter() - started


def select_host(nodes: Sequence[NodeInfo], totals: Sequence[int], rng: random.Random) -> NodeInfo:
    """Highest total wins; ties broken uniformly at random (reservoir sampling, as upstream)."""
    best = nodes[0]
    best_score = totals[0]
    ties = 1
    for node, score in zip(nodes[1:], totals[1:], strict=True):
        if score > best_score:
            best, best_score, ties = node, score, 1
        elif score == best_score:
            ties += 1
            if rng.random() * ties < 1.0:
                best = node
    return best


def pre_filter_all(
    pod: PodInfo,
    filters: Sequence[FilterPlugin],
    cluster: ClusterView,
    num_nodes: int,
    observer: Observer = UNOBSERVED,
) -> None:
    """Upstream's PreFilter: a verdict on the pod whatever the node (FitError), then each filter's
    per-pod state for its per-node checks."""
    started = time.perf_counter()
    try:
        _pre_filter_plugins(pod, filters, cluster, num_nodes, observer)
    except FitError:
        observer.point("PreFilter", UNRESOLVABLE_STATUS, _since(started))
        raise
    observer.point("PreFilter", (), _since(started))


def _pre_filter_plugins(
    pod: PodInfo,
    filters: Sequence[FilterPlugin],
    cluster: ClusterView,
    num_nodes: int,
    observer: Observer,
) -> None:
    if pod.parse_error:
        raise FitError(
            num_nodes, {}, f"parsing pod: {pod.parse_error}", plugins=frozenset({"InterPodAffinity"})
        )
    for f in filters:
        sampled = observer.sampled and getattr(f, "has_pre_filter", True)
        begun = time.perf_counter()
        if not f.applies(pod):
            if sampled:
                observer.plugin(f.name, "PreFilter", SKIP_STATUS, _since(begun))
            continue
        pre_filter = getattr(f, "pre_filter", None)
        if pre_filter is not None:
            verdict = pre_filter(pod)
            if verdict:
                if sampled:
                    observer.plugin(f.name, "PreFilter", UNRESOLVABLE_STATUS, _since(begun))
                raise FitError(num_nodes, {}, verdict, plugins=frozenset({f.name}))
        prepare = getattr(f, "prepare", None)
        if prepare is not None:
            prepare(pod, cluster)
        if sampled:
            observer.plugin(f.name, "PreFilter", (), _since(begun))


def narrow(
    pod: PodInfo, nodes: Sequence[NodeInfo], filters: Sequence[FilterPlugin], rejectors: set[str]
) -> tuple[Sequence[NodeInfo], dict[str, tuple[str, ...]]]:
    """Upstream's PreFilterResult: the nodes the filters naming nodes (NodeAffinity's matchFields)
    leave, and for every other node `node(s) didn't satisfy plugin(s) [<those plugins>]`."""
    names: frozenset[str] | None = None
    plugins: list[str] = []
    for f in filters:
        node_names = getattr(f, "node_names", None)
        if node_names is None or not f.applies(pod):
            continue
        wanted = node_names(pod)
        if wanted is not None:
            names = wanted if names is None else names & wanted
            plugins.append(f.name)
    if names is None:
        return nodes, {}
    rejectors.update(plugins)
    reason = (f"node(s) didn't satisfy plugin(s) [{' '.join(sorted(plugins))}]",)
    return [n for n in nodes if n.name in names], {n.name: reason for n in nodes if n.name not in names}


def schedule(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    filters: Sequence[FilterPlugin],
    scores: Sequence[WeightedScore],
    cluster: ClusterView,
    rng: random.Random,
    search: Search | None = None,
    observer: Observer = UNOBSERVED,
) -> NodeInfo:
    """The chosen node, or FitError saying why none fits. With `search`, big clusters are searched
    only until enough nodes fit (upstream's percentageOfNodesToScore); without, every node is."""
    if not nodes:
        raise FitError(0, {})
    pre_filter_all(pod, filters, cluster, len(nodes), observer)
    if pod.nominated_node:  # the node preemption freed for it: taken at once if it fits now
        nominated = next((n for n in nodes if n.name == pod.nominated_node), None)
        if nominated is not None:
            fits, _ = find_feasible(pod, [nominated], filters, None, cluster, observer=observer)
            if fits:
                return fits[0]
    rejectors: set[str] = set()
    candidates, absent = narrow(pod, nodes, filters, rejectors)
    feasible, rejected = find_feasible(pod, candidates, filters, search, cluster, rejectors, observer)
    if not feasible:
        raise FitError(len(nodes), {**absent, **rejected}, plugins=frozenset(rejectors))
    if len(feasible) == 1:
        return feasible[0]
    return select_host(feasible, score_nodes(pod, feasible, scores, cluster, observer), rng)
