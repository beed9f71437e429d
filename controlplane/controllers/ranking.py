"""Which pods a scale-down deletes first: upstream's ActivePodsWithRanks order, pure.

Deleting the wrong replica hurts: a Ready pod serving traffic before a Pending one, the only pod on a
node before one of three doubled up. Upstream's order (pkg/controller/controller_utils.go), first
deleted first:

1. not yet scheduled, before scheduled;
2. Pending, before Unknown, before Running;
3. not Ready, before Ready;
4. lower `controller.kubernetes.io/pod-deletion-cost`, before higher;
5. more active siblings on the same node ("doubled up"), before fewer;
6. Ready for less time, before longer (compared on a log2 scale of the age, as LogarithmicScaleDown);
7. more container restarts, before fewer;
8. newer, before older (log2 scale again; ties broken by UID).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from controlplane.controllers.podutil import is_active, is_ready, parse_time, ready_condition

Obj = dict[str, Any]
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}


def _node(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _cost(pod: Obj) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _ready_since(pod: Obj) -> datetime | None:
    cond = ready_condition(pod)
    return parse_time(cond.get("lastTransitionTime")) if cond and cond.get("status") == "True" else None


def _max_restarts(pod: Obj) -> int:
    status = pod.get("status") or {}
    counts = [
        int(c.get("restartCount") or 0)
        for key in ("containerStatuses", "initContainerStatuses")
        for c in status.get(key) or []
    ]
    return max(counts, default=0)


def _log_rank(t: datetime, now: datetime) -> int:
    nanos = (now - t).total_seconds() * 1e9
    return int(math.log2(nanos)) if nanos > 0 else -1


def _newer_first(a: datetime | None, b: datetime | None, now: datetime, uid_a: str, uid_b: str) -> int | None:
    """<0 if a goes first: the more recent time (on a log2 scale), a missing time first of all."""
    if a == b:
        return None
    if a is None or b is None:
        return -1 if a is None else 1
    diff = _log_rank(a, now) - _log_rank(b, now)
    if diff == 0:
        return -1 if uid_a < uid_b else (1 if uid_a > uid_b else 0)
    return -1 if diff < 0 else 1


def _compare(a: tuple[Obj, int], b: tuple[Obj, int], now: datetime) -> int:
    pa, rank_a = a
    pb, rank_b = b
    na, nb = _node(pa), _node(pb)
    if na != nb and (not na or not nb):
        return -1 if not na else 1
    phase_a = _PHASE_ORDER.get((pa.get("status") or {}).get("phase", ""), 0)
    phase_b = _PHASE_ORDER.get((pb.get("status") or {}).get("phase", ""), 0)
    if phase_a != phase_b:
        return -1 if phase_a < phase_b else 1
    ready_a, ready_b = is_ready(pa), is_ready(pb)
    if ready_a != ready_b:
        return -1 if not ready_a else 1
    cost_a, cost_b = _cost(pa), _cost(pb)
    if cost_a != cost_b:
        return -1 if cost_a < cost_b else 1
    if rank_a != rank_b:
        return -1 if rank_a > rank_b else 1
    uid_a, uid_b = str(pa["metadata"].get("uid", "")), str(pb["metadata"].get("uid", ""))
    if ready_a and ready_b:
        verdict = _newer_first(_ready_since(pa), _ready_since(pb), now, uid_a, uid_b)
        if verdict:
            return verdict
    restarts_a, restarts_b = _max_restarts(pa), _max_restarts(pb)
    if restarts_a != restarts_b:
        return -1 if restarts_a > restarts_b else 1
    created_a = parse_time(pa["metadata"].get("creationTimestamp"))
    created_b = parse_time(pb["metadata"].get("creationTimestamp"))
    return _newer_first(created_a, created_b, now, uid_a, uid_b) or 0


def pods_to_delete(pods: Sequence[Obj], related: Sequence[Obj], count: int, now: datetime) -> list[Obj]:
    """The `count` pods to delete first; `related` are all pods of the same owner family (the
    Deployment's ReplicaSets), whose active pods per node make the "doubled up" rank."""
    if count >= len(pods):
        return list(pods)
    per_node = Counter(_node(p) for p in related if is_active(p))
    ranked = [(p, per_node[_node(p)]) for p in pods]
    ranked.sort(key=functools.cmp_to_key(lambda a, b: _compare(a, b, now)))
    return [p for p, _ in ranked[:count]]
