"""The HPA's status as upstream's controller writes it: conditions AbleToScale, ScalingActive and
ScalingLimited (in that order; lastTransitionTime moves only when the status does) and the metric
statuses (current averageUtilization and averageValue of Resource metrics)."""

from __future__ import annotations

from typing import Any

from kubeclient.quantity import canonical

Obj = dict[str, Any]
ORDER = ("AbleToScale", "ScalingActive", "ScalingLimited")


def set_condition(conditions: list[Obj], kind: str, status: str, reason: str, message: str, now: str) -> None:
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(status=status, reason=reason, message=message)
            return
    conditions.append(
        {"type": kind, "status": status, "lastTransitionTime": now, "reason": reason, "message": message}
    )


def ordered(conditions: list[Obj]) -> list[Obj]:
    rank = {k: i for i, k in enumerate(ORDER)}
    return sorted(conditions, key=lambda c: rank.get(c.get("type", ""), len(ORDER)))


def milli_quantity(milli: int) -> str:
    return canonical(f"{milli}m")


def resource_status(metric: Obj, raw_average: int, utilization: int | None) -> Obj:
    kind = metric["type"]
    field = "resource" if kind == "Resource" else "containerResource"
    source = metric[field]
    current: Obj = {"averageValue": milli_quantity(raw_average)}
    if utilization is not None:
        current["averageUtilization"] = utilization
    out: Obj = {"name": source["name"], "current": current}
    if kind == "ContainerResource":
        out["container"] = source.get("container", "")
    return {"type": kind, field: out}
