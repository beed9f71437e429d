"""The `endpoints.kubernetes.io/last-change-trigger-time` annotation (upstream's TriggerTimeTracker in
pkg/controller/util/endpoint): when the change that a slice write reflects happened, so a service proxy
can measure network programming latency from the cause, not from when it noticed.

Per Service the tracker remembers the trigger times it saw on the last sync: each selected pod's Ready
condition lastTransitionTime and the Service's creationTimestamp. A sync's trigger time is the earliest
of those that moved since; a Service seen for the first time gives its creationTimestamp; nothing moved
gives None (the annotation is then removed from the slices written). Times are kept as datetimes and
written in RFC 3339 (UTC), as upstream formats them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
LAST_CHANGE_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"


def parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(when: dt.datetime) -> str:
    """RFC 3339 in UTC with the fraction only when there is one (Go's RFC3339Nano)."""
    text = when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def pod_trigger_time(pod: Obj) -> dt.datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastTransitionTime"))
    return None


@dataclass
class _State:
    pods: dict[str, dt.datetime] = field(default_factory=dict)
    service: dt.datetime | None = None


@dataclass
class TriggerTimeTracker:
    states: dict[str, _State] = field(default_factory=dict)

    def compute(self, key: str, service: Obj, pods: list[Obj]) -> dt.datetime | None:
        state = self.states.get(key)
        known = state is not None
        last = state or _State()
        earliest: dt.datetime | None = None
        now_pods: dict[str, dt.datetime] = {}
        for pod in pods:
            when = pod_trigger_time(pod)
            if when is None:
                continue
            name = (pod.get("metadata") or {}).get("name", "")
            now_pods[name] = when
            before = last.pods.get(name)
            if before is None or when > before:
                earliest = when if earliest is None else min(earliest, when)
        created = parse_time((service.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and (last.service is None or created > last.service):
            earliest = created if earliest is None else min(earliest, created)
        self.states[key] = _State(now_pods, created)
        if not known:
            return created
        return earliest

    def forget(self, key: str) -> None:
        self.states.pop(key, None)


def annotate(slice_: Obj, when: dt.datetime | None) -> Obj:
    """The slice with the annotation set to `when`, or without it when None."""
    meta = dict(slice_.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    if when is None:
        annotations.pop(LAST_CHANGE_TRIGGER_TIME, None)
    else:
        annotations[LAST_CHANGE_TRIGGER_TIME] = format_time(when)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return {**slice_, "metadata": meta}
