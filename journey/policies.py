"""The NetworkPolicies of a journey's pods, read through the API: which policies select each pod (those
of its namespace whose podSelector matches its labels) and what that makes of its ingress and egress, by
the API's own definition: not isolated when no selecting policy has that policyType; default deny when
those that do admit nothing (no rules); else the union of their rules. Pure, so it is tested on
recorded objects; `diagnose` names a policy as the boundary when traffic the dataplane tried did not
arrive at a pod it isolates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]
NOT_ISOLATED, DEFAULT_DENY = "not isolated", "default deny"


def policy_types(spec: Obj) -> list[str]:
    """spec.policyTypes, or the API server's default for a policy stored without them."""
    return spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])


@dataclass(frozen=True)
class Isolation:
    """One pod under policies: the selecting policies' names and each direction's state."""

    pod: str
    policies: tuple[str, ...] = ()
    ingress: str = NOT_ISOLATED  # not isolated, default deny, or "N rules (policy, ...)"
    egress: str = NOT_ISOLATED
    ingress_by: tuple[str, ...] = field(default=())  # the policies isolating it for ingress
    egress_by: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        if not self.policies:
            return f"pod {self.pod}: no NetworkPolicy selects it (all traffic admitted)"
        return (
            f"pod {self.pod}: selected by NetworkPolicy {', '.join(self.policies)}; "
            f"ingress {self.ingress}, egress {self.egress}"
        )


def _selects(policy: Obj, pod: Obj) -> bool:
    meta, pod_meta = policy.get("metadata") or {}, pod.get("metadata") or {}
    if meta.get("namespace") != pod_meta.get("namespace"):
        return False
    try:
        selector = from_label_selector((policy.get("spec") or {}).get("podSelector") or {})
    except SelectorError:
        return False  # the API server refuses such a policy; a stored one selects nothing here
    return selector.matches(pod_meta.get("labels") or {})


def _direction(selecting: list[Obj], kind: str, rules_field: str) -> tuple[str, tuple[str, ...]]:
    under = [p for p in selecting if kind in policy_types(p.get("spec") or {})]
    if not under:
        return NOT_ISOLATED, ()
    names = tuple(str((p.get("metadata") or {}).get("name")) for p in under)
    rules = sum(len((p.get("spec") or {}).get(rules_field) or []) for p in under)
    if rules == 0:
        return f"{DEFAULT_DENY} ({', '.join(names)})", names
    return f"isolated: {rules} rule{'s' if rules != 1 else ''} admit ({', '.join(names)})", names


def isolation(pod: Obj, policies: list[Obj]) -> Isolation:
    selecting = sorted(
        (p for p in policies if _selects(p, pod)), key=lambda p: str((p.get("metadata") or {}).get("name"))
    )
    ingress, ingress_by = _direction(selecting, "Ingress", "ingress")
    egress, egress_by = _direction(selecting, "Egress", "egress")
    return Isolation(
        pod=str((pod.get("metadata") or {}).get("name")),
        policies=tuple(str((p.get("metadata") or {}).get("name")) for p in selecting),
        ingress=ingress,
        egress=egress,
        ingress_by=ingress_by,
        egress_by=egress_by,
    )
