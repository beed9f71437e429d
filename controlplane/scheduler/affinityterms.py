"""A pod's inter-pod affinity terms and topology spread constraints, parsed once per pod object.

Upstream's AffinityTerm: the namespaces a term looks in (its `namespaces`, or the pod's own when neither
`namespaces` nor `namespaceSelector` is given), the namespace selector (absent selects nothing, `{}`
everything), the pod label selector with `matchLabelKeys` (key In the pod's value) and
`mismatchLabelKeys` (key NotIn the pod's value) merged in, and the topology key. An unparsable selector
is kept as an error text: the pod then stays Pending with it, and no other pod is affected.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubeclient.selectors import IN, NOT_IN, Requirement, Selector, SelectorError, from_label_selector

HONOR, IGNORE = "Honor", "Ignore"
DO_NOT_SCHEDULE, SCHEDULE_ANYWAY = "DoNotSchedule", "ScheduleAnyway"


@dataclass(frozen=True, slots=True, weakref_slot=True)
class AffinityTerm:
    namespaces: frozenset[str]
    namespace_selector: Selector
    selector: Selector
    topology_key: str
    weight: int = 0  # for preferred terms

    def matches(self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str]) -> bool:
        """Whether a pod in `namespace` with `labels` is one this term is about."""
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels):
            return self.selector.matches(labels)
        return False


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int
    node_affinity_policy: str
    node_taints_policy: str


@dataclass(frozen=True, slots=True)
class PodAffinity:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[AffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[AffinityTerm, ...] = ()

    @property
    def any(self) -> bool:
        return bool(
            self.required_affinity
            or self.required_anti_affinity
            or self.preferred_affinity
            or self.preferred_anti_affinity
        )


NO_AFFINITY = PodAffinity()


def with_label_keys(
    selector: Selector, labels: Mapping[str, str], match_keys: Any, mismatch_keys: Any
) -> Selector:
    """The selector with `key In (value)` per matchLabelKeys and `key NotIn (value)` per
    mismatchLabelKeys, for the keys the pod has (upstream merges them into the selector)."""
    extra = [Requirement.new(str(k), IN, (labels[str(k)],)) for k in match_keys or () if str(k) in labels]
    extra += [
        Requirement.new(str(k), NOT_IN, (labels[str(k)],)) for k in mismatch_keys or () if str(k) in labels
    ]
    if not extra or selector.nothing:
        return selector
    return Selector(tuple(sorted((*selector.requirements, *extra), key=lambda r: r.key)))


def _term(
    namespace: str, labels: Mapping[str, str], term: Mapping[str, Any], weight: int = 0
) -> AffinityTerm:
    selector = from_label_selector(term.get("labelSelector"))
    selector = with_label_keys(selector, labels, term.get("matchLabelKeys"), term.get("mismatchLabelKeys"))
    names = [str(n) for n in term.get("namespaces") or ()]
    ns_selector = term.get("namespaceSelector")
    if not names and ns_selector is None:
        names = [namespace]
    parsed = AffinityTerm(
        frozenset(names),
        from_label_selector(ns_selector),
        selector,
        str(term.get("topologyKey") or ""),
        weight,
    )
    return _interned.setdefault(parsed, parsed)


# One object per distinct term while any pod holds it: a workload's replicas share their terms, and
# the plugins remember a term's verdict on the incoming pod by the term's identity for one decision
# (a node's placed terms are each matched once per decision, not once per node holding them).
_interned: weakref.WeakValueDictionary[AffinityTerm, AffinityTerm] = weakref.WeakValueDictionary()


def parse_affinity(
    namespace: str, labels: Mapping[str, str], affinity: Mapping[str, Any] | None
) -> PodAffinity:
    """The pod's podAffinity/podAntiAffinity terms; raises SelectorError on a bad selector."""
    if not affinity:
        return NO_AFFINITY
    pa = affinity.get("podAffinity") or {}
    paa = affinity.get("podAntiAffinity") or {}
    if not pa and not paa:
        return NO_AFFINITY

    def required(section: Mapping[str, Any]) -> tuple[AffinityTerm, ...]:
        return tuple(
            _term(namespace, labels, t)
            for t in section.get("requiredDuringSchedulingIgnoredDuringExecution") or ()
        )

    def preferred(section: Mapping[str, Any]) -> tuple[AffinityTerm, ...]:
        return tuple(
            _term(namespace, labels, w.get("podAffinityTerm") or {}, int(w.get("weight") or 0))
            for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        )

    return PodAffinity(required(pa), required(paa), preferred(pa), preferred(paa))


def parse_spread(labels: Mapping[str, str], constraints: Any, action: str) -> tuple[SpreadConstraint, ...]:
    """The pod's constraints with `whenUnsatisfiable: action`; raises SelectorError on a bad selector."""
    out: list[SpreadConstraint] = []
    for c in constraints or ():
        if c.get("whenUnsatisfiable") != action:
            continue
        selector = from_label_selector(c.get("labelSelector"))
        selector = with_label_keys(selector, labels, c.get("matchLabelKeys"), ())
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew") or 1),
                topology_key=str(c.get("topologyKey") or ""),
                selector=selector,
                min_domains=int(c.get("minDomains") or 1),
                node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
                node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            )
        )
    return tuple(out)


__all__ = [
    "DO_NOT_SCHEDULE",
    "HONOR",
    "IGNORE",
    "NO_AFFINITY",
    "SCHEDULE_ANYWAY",
    "AffinityTerm",
    "PodAffinity",
    "SelectorError",
    "SpreadConstraint",
    "parse_affinity",
    "parse_spread",
    "with_label_keys",
]
