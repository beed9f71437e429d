"""NodeAffinity (filter): spec.nodeSelector must match the node's labels exactly, and, if present, one of
the required node affinity terms must match.

Its PreFilter, as upstream's: when every required term names nodes by `matchFields` metadata.name In
(a DaemonSet's pods do), only those nodes are filtered at all (`node_names`); the others are reported as
`node(s) didn't satisfy plugin(s) [NodeAffinity]`, and terms whose names have nothing in common make the
pod unschedulable whatever the node (`pod affinity terms conflict`)."""

from __future__ import annotations

from controlplane.scheduler.framework import FITS
from controlplane.scheduler.nodeinfo import NodeInfo, fits_node_affinity
from controlplane.scheduler.podinfo import PodInfo

REASON = "node(s) didn't match Pod's node affinity/selector"
CONFLICT = "pod affinity terms conflict"
NAME_FIELD = "metadata.name"


class NodeAffinityFilter:
    name = "NodeAffinity"

    def applies(self, pod: PodInfo) -> bool:
        return bool(pod.node_selector) or pod.required_terms is not None

    def filter(self, pod: PodInfo, node: NodeInfo) -> tuple[str, ...]:
        assert node.facts is not None
        return FITS if fits_node_affinity(pod, node.facts) else (REASON,)

    def node_names(self, pod: PodInfo) -> frozenset[str] | None:
        """The only nodes the pod's required terms can match by name; None when some term names none."""
        affinity = ((pod.obj.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
        terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
            "nodeSelectorTerms"
        )
        if not terms:
            return None
        names: set[str] = set()
        for term in terms:
            term_names: set[str] | None = None
            for field in (term or {}).get("matchFields") or []:
                if field.get("key") == NAME_FIELD and field.get("operator") == "In":
                    values = set(field.get("values") or [])
                    term_names = values if term_names is None else term_names & values
            if term_names is None:
                return None  # the terms are ORed: this one may match any node
            names |= term_names
        return frozenset(names)

    def pre_filter(self, pod: PodInfo) -> str | None:
        names = self.node_names(pod)
        return CONFLICT if names is not None and not names else None
