"""Taints and tolerations, parsed once so the per-node filter loop compares plain tuples.

Matching follows upstream's Toleration.ToleratesTaint: an empty effect or key on the toleration is a
wildcard, operator Exists ignores the value, Equal (or empty) compares it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
# The effects that keep a pod off a node in the filter; PreferNoSchedule only lowers the score.
FILTER_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})

TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Taint:
        return cls(str(d.get("key") or ""), str(d.get("value") or ""), str(d.get("effect") or ""))

    def describe(self) -> str:
        """Upstream's `{key: value}` form used in the FailedScheduling reason."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Toleration:
        return cls(
            str(d.get("key") or ""),
            str(d.get("operator") or "Equal"),
            str(d.get("value") or ""),
            str(d.get("effect") or ""),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator == "Equal":
            return self.value == taint.value
        return False


def parse_taints(items: Iterable[dict[str, Any]] | None) -> tuple[Taint, ...]:
    return tuple(Taint.from_dict(t) for t in items or () if isinstance(t, dict))


def parse_tolerations(items: Iterable[dict[str, Any]] | None) -> tuple[Toleration, ...]:
    return tuple(Toleration.from_dict(t) for t in items or () if isinstance(t, dict))


def tolerated(taint: Taint, tolerations: Sequence[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def first_untolerated(
    taints: Sequence[Taint], tolerations: Sequence[Toleration], effects: frozenset[str] = FILTER_EFFECTS
) -> Taint | None:
    """The first taint with one of `effects` that no toleration covers (upstream reports the first)."""
    for taint in taints:
        if taint.effect in effects and not tolerated(taint, tolerations):
            return taint
    return None
