"""The two plugin shapes and the constants they share.

A filter answers "can this node take this pod?" with the reasons it cannot (upstream's Status reasons;
they end up verbatim in the FailedScheduling message). A score plugin ranks the feasible nodes 0..100;
`prepare` runs once per pod (upstream's PreScore) and may return SKIP when the plugin has nothing to say
about this pod (it would give every node the same score), so no per-node work is done at all.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from controlplane.scheduler.nodeinfo import NodeInfo
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.topologyspread import SpreadIndex
from kubeclient.selectors import Selector

MAX_NODE_SCORE = 100
SKIP: Any = object()  # returned by ScorePlugin.prepare: this plugin does not score this pod
FITS: tuple[str, ...] = ()


class FilterPlugin(Protocol):
    name: str

    def applies(self, pod: PodInfo) -> bool:
        """False when the filter cannot reject any node for this pod (upstream's PreFilter Skip)."""
        ...

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        """Empty tuple if the node fits, otherwise the reasons it does not."""
        ...

    # A filter may also have `pre_filter(pod) -> str | None` (upstream's PreFilter): run once per pod
    # before any node, a non-empty answer makes the pod unschedulable whatever the node (VolumeBinding);
    # and `prepare(pod, cluster)`: run once per pod before any node, it computes what `filter` then
    # reads per node (InterPodAffinity's and PodTopologySpread's per-topology counts), so a node's check
    # does not walk every pod of the cluster. `has_pre_filter = False` marks the filters whose upstream
    # plugin has no PreFilter, so none is reported in the plugin duration metric. `idle(pod, cluster)`,
    # asked after `prepare`: True when the filter passes every node of the cluster for this pod, so the
    # search may leave it out (upstream calls it anyway; only a cycle whose plugin durations are sampled
    # does here, so the metric counts the calls upstream makes).


@dataclass(frozen=True, slots=True)
class ClusterView:
    """Cluster-wide facts a plugin may need beyond the one node it looks at."""

    total_nodes: int
    image_nodes: Counter[str]
    all_nodes: Sequence[NodeInfo] = ()
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The selector of the Services, ReplicaSets, ReplicationControllers and StatefulSets that select a
    # pod (PodTopologySpread's system-default spreading), None when none does.
    default_selector: Callable[[PodInfo], Selector | None] | None = None
    # Node name -> pods preemption nominated to it that are not bound yet.
    nominated: Mapping[str, Sequence[PodInfo]] = field(default_factory=dict)
    # The nodes of all_nodes holding pods with any inter-pod affinity term, and those holding pods with
    # required anti-affinity (None: not known, look at all of them).
    affinity_nodes: Sequence[NodeInfo] | None = None
    anti_affinity_nodes: Sequence[NodeInfo] | None = None
    # PodTopologySpread's domain counts over all_nodes, kept by the cache (None: walk the nodes).
    spread_index: SpreadIndex | None = None
    # Whether any of all_nodes has a taint, or is unschedulable (True: not known, so maybe).
    any_taints: bool = True
    any_unschedulable: bool = True


class ScorePlugin(Protocol):
    name: str

    def prepare(self, pod: PodInfo, nodes: Sequence[NodeInfo], cluster: ClusterView) -> Any:
        """Per-pod state handed to `score`, or SKIP."""
        ...

    def score_all(self, pod: PodInfo, nodes: Sequence[NodeInfo], state: Any) -> list[int]:
        """Raw scores, one per node, in order. One call per pod (not per node) keeps the hot loop
        inside the plugin, where it is a plain comprehension."""
        ...

    def normalize(self, scores: list[int]) -> list[int]:
        """Rescale the raw scores of all feasible nodes into 0..MAX_NODE_SCORE."""
        ...


_plugin_keys = itertools.count(1)


def plugin_key() -> str:
    """A key of its own for a plugin instance (its configuration), under which it remembers results
    per node (`NodeInfo.by_requests`); unlike id(), never reused by a later instance."""
    return f"p{next(_plugin_keys)}"


def normalize_to_max(scores: list[int], reverse: bool = False) -> list[int]:
    """Upstream's DefaultNormalizeScore: scale so the best raw score becomes 100 (or, reversed, so the
    highest raw count becomes 0). All-zero input stays 0, or becomes 100 everywhere when reversed."""
    top = max(scores, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(scores) if reverse else list(scores)
    out = [MAX_NODE_SCORE * s // top for s in scores]
    return [MAX_NODE_SCORE - s for s in out] if reverse else out


# Upstream's framework statuses, as the metrics label them.
SUCCESS, SKIP_STATUS, ERROR_STATUS = "Success", "Skip", "Error"
UNSCHEDULABLE_STATUS, UNRESOLVABLE_STATUS = "Unschedulable", "UnschedulableAndUnresolvable"


class Observer(Protocol):
    """Where one scheduling cycle reports how long its plugins and extension points took
    (scheduler_plugin_execution_duration_seconds, scheduler_framework_extension_point_duration_seconds).
    A status is upstream's code name, or a filter's reasons (() is Success) for the observer to classify."""

    sampled: bool  # plugin durations are recorded in this cycle (upstream samples a tenth of cycles)

    def plugin(self, name: str, point: str, status: str | tuple[str, ...], seconds: float) -> None: ...

    def plugin_calls(
        self, name: str, point: str, status: str | tuple[str, ...], seconds: Sequence[float]
    ) -> None:
        """Several calls at once (one per node), each of `seconds` one call's duration."""
        ...

    def point(self, point: str, status: str | tuple[str, ...], seconds: float) -> None: ...


class _Unobserved:
    sampled = False

    def plugin(self, name: str, point: str, status: str | tuple[str, ...], seconds: float) -> None:
        pass

    def plugin_calls(
        self, name: str, point: str, status: str | tuple[str, ...], seconds: Sequence[float]
    ) -> None:
        pass

    def point(self, point: str, status: str | tuple[str, ...], seconds: float) -> None:
        pass


UNOBSERVED: Observer = _Unobserved()  # a cycle nobody measures (tests, benchmarks, preemption's trials)
