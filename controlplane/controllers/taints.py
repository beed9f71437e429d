"""Taints and tolerations as upstream reads them, for the controllers that write or act on taints.

Two taints are "the same taint" when key and effect match (upstream's Taint.MatchTaint): a node holds
at most one `node.kubernetes.io/unreachable:NoExecute`, whatever its value or timeAdded. A toleration
tolerates a taint as upstream's Toleration.ToleratesTaint says (an empty key or effect matches any;
operator Exists ignores the value, Equal or empty compares it). These are pure functions over the API's
JSON dicts so the node lifecycle controller and the taint eviction controller agree on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]

NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
PID_PRESSURE = "node.kubernetes.io/pid-pressure"
NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"

UNREACHABLE_NO_EXECUTE: Obj = {"key": UNREACHABLE, "effect": NO_EXECUTE}
NOT_READY_NO_EXECUTE: Obj = {"key": NOT_READY, "effect": NO_EXECUTE}

# Which node condition in which status means which taint (upstream's nodeConditionToTaintKeyStatusMap).
CONDITION_TAINTS: dict[str, dict[str, str]] = {
    "Ready": {"False": NOT_READY, "Unknown": UNREACHABLE},
    "MemoryPressure": {"True": MEMORY_PRESSURE},
    "DiskPressure": {"True": DISK_PRESSURE},
    "NetworkUnavailable": {"True": NETWORK_UNAVAILABLE},
    "PIDPressure": {"True": PID_PRESSURE},
}
# The taint keys the node lifecycle controller owns (upstream's taintKeyToNodeConditionMap).
CONDITION_TAINT_KEYS = frozenset(key for by_status in CONDITION_TAINTS.values() for key in by_status.values())


def node_taints(node: Obj) -> list[Obj]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]


def same_taint(a: Obj, b: Obj) -> bool:
    """Key and effect match (MatchTaint)."""
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def has_taint(taints: Iterable[Obj], taint: Obj) -> bool:
    return any(same_taint(t, taint) for t in taints)


def has_taint_key(taints: Iterable[Obj], key: str) -> bool:
    return any(t.get("key") == key for t in taints)


def _significant(taint: Obj) -> Obj:
    return {k: v for k, v in taint.items() if v not in (None, "")}


def add_or_update(taints: list[Obj], taint: Obj) -> tuple[list[Obj], bool]:
    """The list with `taint` in it (replacing the same taint if it differs in any field, timeAdded
    included), and whether anything changed (upstream's AddOrUpdateTaint)."""
    out: list[Obj] = []
    replaced = False
    for existing in taints:
        if same_taint(existing, taint):
            if _significant(existing) == _significant(taint):
                return list(taints), False
            out.append(deep_copy(taint))
            replaced = True
        else:
            out.append(existing)
    if not replaced:
        out.append(deep_copy(taint))
    return out, True


def remove(taints: list[Obj], taint: Obj) -> tuple[list[Obj], bool]:
    """The list without the same taint, and whether it was there (upstream's RemoveTaint)."""
    out = [t for t in taints if not same_taint(t, taint)]
    return out, len(out) != len(taints)


def difference(wanted: list[Obj], have: list[Obj]) -> tuple[list[Obj], list[Obj]]:
    """(to add, to remove) to turn `have` into `wanted`, by key and effect (TaintSetDiff)."""
    return [t for t in wanted if not has_taint(have, t)], [t for t in have if not has_taint(wanted, t)]


def condition_taints(node: Obj) -> list[Obj]:
    """The NoSchedule taints a node's conditions and spec.unschedulable call for (TaintNodesByCondition)."""
    wanted: list[Obj] = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        key = CONDITION_TAINTS.get(cond.get("type", ""), {}).get(cond.get("status", ""))
        if key:
            wanted.append({"key": key, "effect": NO_SCHEDULE})
    if (node.get("spec") or {}).get("unschedulable"):
        wanted.append({"key": UNSCHEDULABLE, "effect": NO_SCHEDULE})
    return wanted


def owned_no_schedule_taints(node: Obj) -> list[Obj]:
    """The node's NoSchedule taints that the condition rule above manages (and may remove)."""
    return [
        t
        for t in node_taints(node)
        if t.get("effect") == NO_SCHEDULE
        and (t.get("key") == UNSCHEDULABLE or t.get("key") in CONDITION_TAINT_KEYS)
    ]


def no_execute(taints: Iterable[Obj]) -> list[Obj]:
    return [t for t in taints if t.get("effect") == NO_EXECUTE]


# --- tolerations ------------------------------------------------------------------------------------


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """upstream's Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def matching_tolerations(taints: list[Obj], tolerations: list[Obj]) -> tuple[bool, list[Obj]]:
    """Whether every taint is tolerated, and the first toleration that tolerates each one (upstream's
    GetMatchingTolerations: the first match wins, so its tolerationSeconds is the one that counts)."""
    if not taints:
        return True, []
    used: list[Obj] = []
    for taint in taints:
        match = next((t for t in tolerations if tolerates(t, taint)), None)
        if match is None:
            return False, []
        used.append(match)
    return True, used


def min_toleration_seconds(tolerations: list[Obj]) -> float | None:
    """The shortest tolerationSeconds among `tolerations` (<= 0 counts as 0), or None when every one
    tolerates forever; no tolerations at all is 0 (upstream's getMinTolerationTime)."""
    if not tolerations:
        return 0.0
    shortest: float | None = None
    for toleration in tolerations:
        seconds = toleration.get("tolerationSeconds")
        if seconds is None:
            continue
        if seconds <= 0:
            return 0.0
        shortest = float(seconds) if shortest is None else min(shortest, float(seconds))
    return shortest
