"""events.k8s.io/v1 Event: stored as core/v1 Events (as upstream does) and converted at the edge, so
`kubectl describe` (core events) sees what a component wrote through either API. This module is the
one place that knows the two forms; field selectors use events.k8s.io's names for the stored fields."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import not_supported
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, SelectableField
from controlplane.apiserver.kinds.event import COLUMNS, TYPES, event_cells
from controlplane.apiserver.kinds.event import KIND as CORE_EVENT

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


def _convert(event: Obj, api_version: str, renames: dict[str, str]) -> Obj:
    """The fields both forms share, and the renamed ones under their other names."""
    out: Obj = {"apiVersion": api_version, "kind": "Event"}
    out.update((f, event[f]) for f in _SAME if f in event)
    out.update((renames[f], v) for f, v in event.items() if f in renames)
    return out


class EventV1(Kind):
    group = "events.k8s.io"
    kind = "Event"
    plural = "events"
    short_names = ("ev",)
    storage_bucket = CORE_EVENT.bucket
    converts = True
    gc_policy = CORE_EVENT.gc_policy
    schema = "EventsV1Event"
    type_marks = {
        ("EventsV1Event", "eventTime"): "microtime",
        ("EventsV1EventSeries", "lastObservedTime"): "microtime",
    }
    # upstream's field label conversion for events.k8s.io/v1 (selectors name the v1 fields)
    field_selectors = (
        *(
            SelectableField(f"regarding.{f}", f"involvedObject.{f}")
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        ),
        SelectableField("reportingController", "reportingComponent"),
        SelectableField("reason"),
        SelectableField("type"),
        SelectableField("source", "source.component", fallback="reportingComponent"),
    )
    field_refusal = REFUSE_UNSUPPORTED

    @property
    def storage_schema(self) -> str:
        return CORE_EVENT.schema

    # Tables are built from the stored (core) form.
    columns = COLUMNS

    def validate_name(self, path: str, name: str) -> list[Any]:
        return CORE_EVENT.validate_name(path, name)

    def validate_spec(self, obj: Obj) -> list[Any]:
        errors = CORE_EVENT.validate_spec(obj)
        if obj.get("type") not in (None, "", *TYPES):  # the strict validation only this API applies
            errors.append(not_supported("type", obj.get("type"), TYPES))
        return errors

    def to_storage(self, event: Obj) -> Obj:
        out = _convert(event, "v1", {new: old for new, old in _RENAMES.items()})
        series = out.get("series")
        if isinstance(series, dict):
            out["series"] = {k: v for k, v in series.items() if k in ("count", "lastObservedTime")}
        out.setdefault("involvedObject", {})
        return out

    def from_storage(self, event: Obj) -> Obj:
        out = _convert(event, self.api_version, {old: new for new, old in _RENAMES.items()})
        if out.get("eventTime") is None:
            # Upstream serializes a missing eventTime as null, which strict clients (the Python client's
            # models require it) cannot read; the best stand-in is when the event was first seen.
            seen = out.get("deprecatedFirstTimestamp") or (out.get("metadata") or {}).get("creationTimestamp")
            out["eventTime"] = (
                seen.replace("Z", ".000000Z") if isinstance(seen, str) and "." not in seen else seen
            )
        return out

    def cells(self, obj: Obj) -> list[Any]:
        return event_cells(obj)


KIND = EventV1()
