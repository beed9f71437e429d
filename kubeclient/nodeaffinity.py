"""Node selector terms (nodeAffinity, a PersistentVolume's nodeAffinity, a RuntimeClass's scheduling):
whether a node matches, the one implementation the scheduler, the DaemonSet controller, the volume
binder and the kubelet's admission share (upstream's component-helpers/scheduling/corev1/nodeaffinity).
The scheduler compiles a pod's terms once (`Term.from_dict`); the others match the API's dicts
directly (`term_matches`, `node_selector_matches`).

Semantics are upstream's: terms are ORed, the requirements inside one term ANDed; an empty term matches
nothing; NotIn and DoesNotExist match a node without the label; Gt/Lt compare integers and fail when
either side is not one; matchFields supports metadata.name with In/NotIn only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Requirement:
        return cls(
            str(d.get("key") or ""),
            str(d.get("operator") or ""),
            tuple(str(v) for v in d.get("values") or ()),
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op == "In":
            return present and labels[self.key] in self.values
        if op == "NotIn":
            return not present or labels[self.key] not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt"):
            if not present or len(self.values) != 1:
                return False
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class Term:
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Term:
        d = d or {}
        return cls(
            tuple(Requirement.from_dict(r) for r in d.get("matchExpressions") or ()),
            tuple(Requirement.from_dict(r) for r in d.get("matchFields") or ()),
        )

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.expressions and not self.fields:
            return False
        for req in self.expressions:
            if not req.matches(labels):
                return False
        for req in self.fields:
            if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
                return False
            if not req.matches({"metadata.name": node_name}):
                return False
        return True


def any_term_matches(terms: Sequence[Term], labels: Mapping[str, str], node_name: str) -> bool:
    return any(t.matches(labels, node_name) for t in terms)


def term_matches(term: dict[str, Any] | None, labels: Mapping[str, str], node_name: str) -> bool:
    """One NodeSelectorTerm (its requirements ANDed; an empty term matches nothing) against a node."""
    return Term.from_dict(term).matches(labels, node_name)


def node_selector_matches(selector: dict[str, Any] | None, node_name: str, labels: Mapping[str, str]) -> bool:
    """A NodeSelector (its terms ORed) against a node."""
    return any(term_matches(t, labels, node_name) for t in (selector or {}).get("nodeSelectorTerms") or [])
