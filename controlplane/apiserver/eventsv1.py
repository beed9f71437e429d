"""events.k8s.io/v1 Events are stored as core/v1 Events (as upstream does) and converted at the edge,
so `kubectl describe` (core events) sees what a component wrote through either API."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# events.k8s.io/v1 field -> core/v1 field
_RENAMES = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def to_core(event: Obj) -> Obj:
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for field in _SAME:
        if field in event:
            out[field] = event[field]
    for new, old in _RENAMES.items():
        if new in event:
            out[old] = event[new]
    series = out.get("series")
    if isinstance(series, dict):
        out["series"] = {k: v for k, v in series.items() if k in ("count", "lastObservedTime")}
    out.setdefault("involvedObject", {})
    return out


def from_core(event: Obj) -> Obj:
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for field in _SAME:
        if field in event:
            out[field] = event[field]
    for new, old in _RENAMES.items():
        if old in event:
            out[new] = event[old]
    if out.get("eventTime") is None:
        # Upstream serializes a missing eventTime as null, which strict clients (the Python client's
        # models require it) cannot read; the best stand-in is when the event was first seen.
        seen = out.get("deprecatedFirstTimestamp") or (out.get("metadata") or {}).get("creationTimestamp")
        out["eventTime"] = seen.replace("Z", ".000000Z") if isinstance(seen, str) and "." not in seen else seen
    return out
