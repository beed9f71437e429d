"""Facts about pods that several controllers read, as upstream's podutil and controller utils state
them: active, ready, available (ready for minReadySeconds), and the controller's own pods."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def is_active(pod: Obj) -> bool:
    """Counted as a replica: not finished, not being deleted (upstream's controller.IsPodActive)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def ready_condition(pod: Obj) -> Obj | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond
    return None


def is_ready(pod: Obj) -> bool:
    cond = ready_condition(pod)
    return bool(cond and cond.get("status") == "True")


def is_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    """Ready, and for at least minReadySeconds (upstream's podutil.IsPodAvailable)."""
    cond = ready_condition(pod)
    if not cond or cond.get("status") != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time(cond.get("lastTransitionTime"))
    return since is not None and (now - since).total_seconds() > min_ready_seconds


def now() -> datetime:
    return datetime.now(UTC)
