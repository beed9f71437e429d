"""A Deployment's conditions and their reasons, as upstream's deployment util states them.

Available says whether at least spec.replicas - maxUnavailable replicas are available; Progressing
tells the rollout's story (a new ReplicaSet created or found, a ReplicaSet updated, the new one
available, paused, resumed, out of time); ReplicaFailure is copied from a ReplicaSet that cannot create
or delete pods. Setting a condition that already holds with the same status and reason changes nothing,
so a sync that learned nothing new writes nothing; a changed reason with the same status keeps the
lastTransitionTime.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

Obj = dict[str, Any]

AVAILABLE = "Available"
PROGRESSING = "Progressing"
REPLICA_FAILURE = "ReplicaFailure"

# Progressing reasons
RS_UPDATED = "ReplicaSetUpdated"
FAILED_RS_CREATE = "ReplicaSetCreateError"
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
PAUSED = "DeploymentPaused"
RESUMED = "DeploymentResumed"
# Available reasons
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"


def timestamp(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_condition(type_: str, status: str, reason: str, message: str, now: datetime) -> Obj:
    stamp = timestamp(now)
    return {
        "type": type_,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def get_condition(status: Obj, type_: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def set_condition(status: Obj, cond: Obj) -> None:
    """Add or replace the condition of its type (at the end), unless one with the same status and
    reason is there already."""
    current = get_condition(status, cond["type"])
    if (
        current is not None
        and current.get("status") == cond["status"]
        and current.get("reason") == cond["reason"]
    ):
        return
    cond = dict(cond)
    if current is not None and current.get("status") == cond["status"]:
        cond["lastTransitionTime"] = current.get("lastTransitionTime", cond["lastTransitionTime"])
    status["conditions"] = [
        *(c for c in status.get("conditions") or [] if c.get("type") != cond["type"]),
        cond,
    ]


def remove_condition(status: Obj, type_: str) -> None:
    remaining = [c for c in status.get("conditions") or [] if c.get("type") != type_]
    if remaining:
        status["conditions"] = remaining
    else:
        status.pop("conditions", None)


def from_replica_set(cond: Obj) -> Obj:
    """A ReplicaSet's condition as a Deployment condition (ReplicaSetToDeploymentCondition)."""
    return {
        "type": cond.get("type"),
        "status": cond.get("status"),
        "lastUpdateTime": cond.get("lastTransitionTime"),
        "lastTransitionTime": cond.get("lastTransitionTime"),
        "reason": cond.get("reason"),
        "message": cond.get("message"),
    }
