"""The disruption controller's arithmetic (upstream's pkg/controller/disruption/disruption.go), pure so
every number can be tested without a server.

- expected pods and desired healthy (getExpectedPodCount): an integer minAvailable needs that many
  healthy pods out of the pods there are; a percentage minAvailable, or any maxUnavailable, is taken of
  the summed scale of the pods' controllers (rounded up, as intstr.GetScaledValueFromIntOrPercent);
- the disrupted-pods map (buildDisruptedPodMap): pods the eviction handler is deleting are not healthy
  for DeletionTimeout (2 min) after it recorded them; after that, or once they are terminating, they
  leave the map, and the budget is rechecked when the earliest entry expires;
- current healthy (countHealthyPods): Ready pods neither terminating nor recently disrupted;
- disruptions allowed = current healthy - desired healthy, never below 0, and 0 while no pod is
  expected (a budget whose first pods appear before its first sync is safe);
- the DisruptionAllowed condition: True/SufficientPods, False/InsufficientPods, False/SyncFailed;
- a pod's DisruptionTarget condition that no deletion followed (an eviction whose delete failed) is
  stale after 2 min (nonTerminatingPodHasStaleDisruptionCondition) and is then set back to False.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers import podutil
from kubeclient.informer import controller_ref

Obj = dict[str, Any]

DELETION_TIMEOUT = timedelta(minutes=2)
STALE_POD_DISRUPTION_TIMEOUT = timedelta(minutes=2)
CONDITION = "DisruptionAllowed"
SUFFICIENT_PODS = "SufficientPods"
INSUFFICIENT_PODS = "InsufficientPods"
SYNC_FAILED = "SyncFailed"


class ExpectedCountError(Exception):
    """The budget's numbers cannot be computed (a pod whose controller cannot be found)."""


def scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise ExpectedCountError("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = int(value[:-1])
    except ValueError:
        raise ExpectedCountError(
            f'invalid value "{value}": strconv.Atoi: parsing "{value[:-1]}": invalid syntax'
        ) from None
    return math.ceil(percent * total / 100)


@dataclass(frozen=True)
class Scale:
    """A controller's UID and its spec.replicas (controllerAndScale)."""

    uid: str
    replicas: int


@dataclass
class Expected:
    expected: int = 0
    desired: int = 0
    unmanaged: list[str] = field(default_factory=list)


def expected_scale(pods: list[Obj], scale_of: Any) -> tuple[int, list[str]]:
    """getExpectedScale: the sum of the distinct controllers' scales; pods with no controller are
    reported; a controller none of the finders knows is an error. `scale_of(ref, namespace)` -> Scale
    or None."""
    scales: dict[str, int] = {}
    unmanaged: list[str] = []
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None:
            unmanaged.append(pod["metadata"]["name"])
            continue
        if ref.get("uid") in scales:
            continue
        found = scale_of(ref, pod["metadata"].get("namespace", ""))
        if found is None:
            raise ExpectedCountError(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[found.uid] = found.replicas
    return sum(scales.values()), unmanaged


def expected_count(spec: Obj, pods: list[Obj], scale_of: Any) -> Expected:
    """getExpectedPodCount."""
    out = Expected()
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        out.expected, out.unmanaged = expected_scale(pods, scale_of)
        out.desired = max(out.expected - scaled(max_unavailable, out.expected), 0)
    elif min_available is not None:
        if isinstance(min_available, int):
            out.desired, out.expected = min_available, len(pods)
        else:
            out.expected, out.unmanaged = expected_scale(pods, scale_of)
            out.desired = scaled(min_available, out.expected)
    return out


def disrupted_pods(
    pods: list[Obj], recorded: dict[str, str] | None, now: datetime
) -> tuple[dict[str, str], datetime | None, list[Obj]]:
    """buildDisruptedPodMap: the entries still pending, when to look again, and the pods that were
    expected to go but did not (for the NotDeleted event)."""
    kept: dict[str, str] = {}
    recheck: datetime | None = None
    overdue: list[Obj] = []
    if not recorded:
        return kept, recheck, overdue
    for pod in pods:
        name = pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp") or name not in recorded:
            continue
        when = podutil.parse_time(recorded[name])
        if when is None:
            continue
        due = when + DELETION_TIMEOUT
        if due < now:
            overdue.append(pod)
            continue
        if recheck is None or due < recheck:
            recheck = due
        kept[name] = recorded[name]
    return kept, recheck, overdue


def current_healthy(pods: list[Obj], disrupted: dict[str, str], now: datetime) -> int:
    """countHealthyPods."""
    count = 0
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        when = podutil.parse_time(disrupted.get(meta["name"]))
        if when is not None and when + DELETION_TIMEOUT > now:
            continue
        if podutil.is_ready(pod):
            count += 1
    return count


def disruptions_allowed(healthy: int, desired: int, expected: int) -> int:
    allowed = healthy - desired
    return 0 if expected <= 0 or allowed <= 0 else allowed


def set_condition(status: Obj, wanted: Obj, stamp: str) -> None:
    """meta.SetStatusCondition: the transition time moves only with the status."""
    conditions = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == wanted["type"]:
            if cond.get("status") != wanted["status"]:
                cond["lastTransitionTime"] = stamp
            cond.update({k: v for k, v in wanted.items() if k != "type"})
            return
    conditions.append({**wanted, "lastTransitionTime": stamp})


def allowed_condition(status: Obj) -> Obj:
    """UpdateDisruptionAllowedCondition's condition for a status."""
    ok = status.get("disruptionsAllowed", 0) > 0
    return {
        "type": CONDITION,
        "status": "True" if ok else "False",
        "reason": SUFFICIENT_PODS if ok else INSUFFICIENT_PODS,
        "message": "",
        "observedGeneration": status.get("observedGeneration", 0),
    }


def conditions_up_to_date(pdb: Obj) -> bool:
    """ConditionsAreUpToDate."""
    status = pdb.get("status") or {}
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == CONDITION), None)
    if cond is None or status.get("observedGeneration") != pdb["metadata"].get("generation"):
        return False
    if status.get("disruptionsAllowed", 0) > 0:
        return cond.get("status") == "True" and cond.get("reason") == SUFFICIENT_PODS
    return cond.get("status") == "False" and cond.get("reason") == INSUFFICIENT_PODS


def new_status(pdb: Obj, healthy: int, found: Expected, disrupted: dict[str, str], stamp: str) -> Obj | None:
    """updatePdbStatus: the status to write, or None when the stored one already says it."""
    status = pdb.get("status") or {}
    allowed = disruptions_allowed(healthy, found.desired, found.expected)
    generation = pdb["metadata"].get("generation", 0)
    if (
        status.get("currentHealthy", 0) == healthy
        and status.get("desiredHealthy", 0) == found.desired
        and status.get("expectedPods", 0) == found.expected
        and status.get("disruptionsAllowed", 0) == allowed
        and (status.get("disruptedPods") or {}) == disrupted
        and status.get("observedGeneration", 0) == generation
        and conditions_up_to_date(pdb)
    ):
        return None
    out: Obj = {
        "currentHealthy": healthy,
        "desiredHealthy": found.desired,
        "expectedPods": found.expected,
        "disruptionsAllowed": allowed,
        "observedGeneration": generation,
        "conditions": [dict(c) for c in status.get("conditions") or []],
    }
    if disrupted:
        out["disruptedPods"] = disrupted
    set_condition(out, allowed_condition(out), stamp)
    return out


def fail_safe_status(pdb: Obj, message: str, stamp: str) -> Obj:
    """failSafe: no disruptions allowed, DisruptionAllowed False with SyncFailed and the error."""
    status = dict(pdb.get("status") or {})
    status["conditions"] = [dict(c) for c in status.get("conditions") or []]
    status["disruptionsAllowed"] = 0
    wanted = {
        "type": CONDITION,
        "status": "False",
        "reason": SYNC_FAILED,
        "message": message,
        "observedGeneration": status.get("observedGeneration", 0),
    }
    set_condition(status, wanted, stamp)
    return status


def stale_disruption_wait(pod: Obj, now: datetime) -> timedelta | None:
    """nonTerminatingPodHasStaleDisruptionCondition: None when the pod has no DisruptionTarget to reset
    (none, not True, set by the kubelet, the pod terminating or finished); otherwise how long until it
    is stale (zero: now)."""
    meta, status = pod["metadata"], pod.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    cond = next((c for c in status.get("conditions") or [] if c.get("type") == "DisruptionTarget"), None)
    if cond is None or cond.get("status") != "True" or cond.get("reason") == "TerminationByKubelet":
        return None
    since = podutil.parse_time(cond.get("lastTransitionTime")) or now
    return max(STALE_POD_DISRUPTION_TIMEOUT - (now - since), timedelta())
