"""One node as the scheduler sees it: its parsed object plus the running total of what its pods take.

Totals are updated incrementally as pods are added and removed (assumed, confirmed, deleted), so a
filter never has to walk a node's pod list. The node object may be missing (pods bound to a node that
the watch has not shown yet, or that was deleted): such a NodeInfo is kept for its pods only and is
never offered to a pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.affinityterms import AffinityTerm
from controlplane.scheduler.podinfo import (
    HostPort,
    PodInfo,
    Resources,
    node_matches,
    normalize_image,
    resource_amount,
)
from controlplane.scheduler.taints import PREFER_NO_SCHEDULE, Taint, parse_taints


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The parts of a Node object the plugins read, parsed once per node update."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    soft_taints: tuple[Taint, ...]  # the PreferNoSchedule ones, which only the score reads
    unschedulable: bool
    allocatable: Resources
    images: dict[str, int]  # normalized image name -> size in bytes
    # PodInfo.node_affinity_id -> whether these labels satisfy it: facts are replaced, never changed,
    # when the node's labels change, so a verdict stays true for as long as it is reachable.
    affinity_verdicts: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_node(cls, node: dict[str, Any]) -> NodeFacts:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        alloc_src = status.get("allocatable") or status.get("capacity") or {}
        allocatable: Resources = {}
        for name, q in alloc_src.items():
            try:
                allocatable[name] = resource_amount(name, q)
            except ValueError:
                continue
        images: dict[str, int] = {}
        for image in status.get("images") or ():
            size = int(image.get("sizeBytes") or 0)
            for n in image.get("names") or ():
                if "@sha256:" not in n:
                    images[normalize_image(str(n))] = size
        taints = parse_taints(spec.get("taints"))
        return cls(
            name=str(meta.get("name") or ""),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            taints=taints,
            soft_taints=tuple(t for t in taints if t.effect == PREFER_NO_SCHEDULE),
            unschedulable=bool(spec.get("unschedulable")),
            allocatable=allocatable,
            images=images,
        )


VERDICTS_KEPT = 256  # distinct node affinities remembered per node before its memo starts afresh


def fits_node_affinity(pod: PodInfo, facts: NodeFacts) -> bool:
    """`podinfo.node_matches` for this node, remembered per distinct (nodeSelector, required terms):
    a workload's pods share them, so the terms are matched once per node, not once per pod and node."""
    key = pod.node_affinity_id
    if not key:
        return True
    verdicts = facts.affinity_verdicts
    verdict = verdicts.get(key)
    if verdict is None:
        if len(verdicts) >= VERDICTS_KEPT:
            verdicts.clear()
        verdict = verdicts[key] = node_matches(pod, facts.labels, facts.name)
    return verdict


@dataclass(slots=True)
class NodeInfo:
    name: str
    facts: NodeFacts | None = None
    pods: dict[str, PodInfo] = field(default_factory=dict)
    requested: Resources = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    ports: list[HostPort] = field(default_factory=list)
    # Pods with any inter-pod affinity term, and those with required anti-affinity: the only pods
    # InterPodAffinity must look at when the incoming pod has no terms of its own.
    affinity_pods: dict[str, PodInfo] = field(default_factory=dict)  # terms the score reads
    # The required anti-affinity terms of this node's pods, each with how many pods hold it (terms
    # are interned: a workload's replicas share one), which the incoming pod must not match.
    anti_terms: dict[AffinityTerm, int] = field(default_factory=dict)
    # How many of this node's pods have each (namespace, labels): pods of a template share them, so
    # a term is matched once per group, not once per pod (InterPodAffinity's filter and score).
    label_groups: dict[tuple[str, tuple[tuple[str, str], ...]], int] = field(default_factory=dict)
    # The terms of this node's pods that InterPodAffinity's score reads (their required affinity,
    # preferred affinity and preferred anti-affinity: SCORED_TERM_KINDS), each with how many pods hold it.
    scored_terms: dict[tuple[int, AffinityTerm], int] = field(default_factory=dict)
    # Counts of this node's pods matching a (namespace, selector), kept until its pods change: pods of
    # one workload share a selector, so PodTopologySpread recounts only the node that changed.
    match_counts: dict[tuple[str, int], int] = field(default_factory=dict)  # (namespace or kind, id)
    # Results that depend only on this node (its facts and pods) and on the pod's requests: keyed by
    # PodInfo.requests_id (NodeResourcesFit's verdict) or a score plugin's key for it; a workload's pods
    # share them, so each is worked out once per node until the node's pods or facts change.
    by_requests: dict[int | str, Any] = field(default_factory=dict)
    # "namespace/claim" -> how many of this node's pods use the claim (upstream's PVCRefCounts), which
    # VolumeRestrictions sums over nodes for a ReadWriteOncePod claim.
    claim_refs: dict[str, int] = field(default_factory=dict)

    def add_pod(self, pod: PodInfo) -> None:
        if pod.uid in self.pods:
            self.remove_pod(pod.uid)
        self.pods[pod.uid] = pod
        if self.match_counts:
            self.match_counts = {}
        if self.by_requests:
            self.by_requests = {}
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v
        self.nonzero_cpu += pod.nonzero_cpu
        self.nonzero_memory += pod.nonzero_memory
        self.ports.extend(pod.host_ports)
        terms = pod.affinity
        if terms.required_affinity or terms.preferred_affinity or terms.preferred_anti_affinity:
            self.affinity_pods[pod.uid] = pod
        for term in terms.required_anti_affinity:
            self.anti_terms[term] = self.anti_terms.get(term, 0) + 1
        for claim in pod.claims:
            key = f"{pod.namespace}/{claim}"
            self.claim_refs[key] = self.claim_refs.get(key, 0) + 1
        group = (pod.namespace, pod.label_key)
        self.label_groups[group] = self.label_groups.get(group, 0) + 1
        for held in scored_terms(pod):
            self.scored_terms[held] = self.scored_terms.get(held, 0) + 1

    def copy(self) -> NodeInfo:
        """A copy whose pods can be changed without touching this one (preemption's what-if)."""
        return NodeInfo(
            self.name,
            self.facts,
            dict(self.pods),
            dict(self.requested),
            self.nonzero_cpu,
            self.nonzero_memory,
            list(self.ports),
            dict(self.affinity_pods),
            dict(self.anti_terms),
            dict(self.label_groups),
            dict(self.scored_terms),
            claim_refs=dict(self.claim_refs),
        )

    def remove_pod(self, uid: str) -> PodInfo | None:
        pod = self.pods.pop(uid, None)
        if pod is None:
            return None
        if self.match_counts:
            self.match_counts = {}
        if self.by_requests:
            self.by_requests = {}
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
        self.nonzero_cpu -= pod.nonzero_cpu
        self.nonzero_memory -= pod.nonzero_memory
        for p in pod.host_ports:
            self.ports.remove(p)
        self.affinity_pods.pop(uid, None)
        for term in pod.affinity.required_anti_affinity:
            _drop(self.anti_terms, term)
        for claim in pod.claims:
            _drop(self.claim_refs, f"{pod.namespace}/{claim}")
        _drop(self.label_groups, (pod.namespace, pod.label_key))
        for held in scored_terms(pod):
            _drop(self.scored_terms, held)
        return pod


# The kinds of scored_terms' keys: a placed pod's required affinity term (the incoming pod matching it
# earns the hard-affinity weight), preferred affinity term (+weight), preferred anti-affinity (-weight).
REQUIRED_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI_AFFINITY = 0, 1, 2
SCORED_TERM_KINDS = (REQUIRED_AFFINITY, PREFERRED_AFFINITY, PREFERRED_ANTI_AFFINITY)


def scored_terms(pod: PodInfo) -> list[tuple[int, AffinityTerm]]:
    terms = pod.affinity
    if not terms.any:
        return []
    held = [(REQUIRED_AFFINITY, t) for t in terms.required_affinity]
    held += [(PREFERRED_AFFINITY, t) for t in terms.preferred_affinity]
    held += [(PREFERRED_ANTI_AFFINITY, t) for t in terms.preferred_anti_affinity]
    return held


def _drop(counts: dict[Any, int], key: Any) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
