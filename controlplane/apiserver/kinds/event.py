"""core/v1 Event: what components report about objects; `kubectl describe` shows them. Events expire
after --event-ttl without activity (eventttl.py), as upstream's etcd lease does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver import deletion, tables
from controlplane.apiserver.errors import FieldError, required
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, SelectableField, fields
from controlplane.apiserver.validation import no_name_rule

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry, ServerConfig

Obj = dict[str, Any]

TYPES = ["Normal", "Warning"]
COLUMNS = (
    tables.column("Last Seen", desc="Time when last event occurred"),
    tables.column(
        "Type", desc="Type of this event (Normal, Warning), new types could be added in the future."
    ),
    tables.column(
        "Reason",
        desc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    tables.column("Object", desc="The object that this event is about."),
    tables.column("Subobject", 1, desc="The field path of the object."),
    tables.column("Source", 1, desc="The component reporting this event."),
    tables.column("Message", desc="A human-readable description of the status of this operation."),
    tables.column("First Seen", 1, desc="The time at which the event was first recorded."),
    tables.column("Count", 1, kind="integer", desc="The number of times this event has occurred."),
    tables.column("Name", 1, desc="Name must be unique within a namespace."),
)


def event_cells(obj: Obj) -> list[Any]:
    """printEvent, on the stored (core) form."""
    first = (
        tables.since(obj.get("firstTimestamp"))
        if obj.get("firstTimestamp")
        else tables.since(obj.get("eventTime"))
    )
    last = tables.since(obj.get("lastTimestamp")) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 0
    series = obj.get("series")
    if series:
        last = tables.since(series.get("lastObservedTime"))
        count = series.get("count", 0)
    elif not count:
        count = 1
    involved = obj.get("involvedObject") or {}
    kind = (involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = obj.get("source") or {}
    if source.get("component"):
        src = source["component"] + (f", {source['host']}" if source.get("host") else "")
    else:
        src = obj.get("reportingComponent", "") + (
            f", {obj['reportingInstance']}" if obj.get("reportingInstance") else ""
        )
    return [
        last,
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        src,
        (obj.get("message") or "").strip(),
        first,
        int(count),
        obj["metadata"].get("name"),
    ]


class Event(Kind):
    kind = "Event"
    plural = "events"
    short_names = ("ev",)
    schema = "CoreV1Event"
    gc_policy = deletion.UNSUPPORTED  # events own nothing: no garbage-collector finalizers
    type_marks = {
        ("CoreV1Event", "eventTime"): "microtime",
        ("CoreV1EventSeries", "lastObservedTime"): "microtime",
    }
    field_selectors = (
        *fields(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        ),
        # Upstream's ToSelectableFields: an event written through events.k8s.io has no source.component.
        SelectableField("source", "source.component", fallback="reportingComponent"),
    )
    field_refusal = REFUSE_UNSUPPORTED
    columns = COLUMNS

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return no_name_rule(path, name)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors: list[FieldError] = []
        if "involvedObject" not in obj:
            errors.append(required("involvedObject"))
        # Any type: upstream checks it only for events written through events.k8s.io/v1 (eventsv1.py).
        return errors

    def controllers(self, registry: Registry, config: ServerConfig) -> list[Any]:
        from controlplane.apiserver.eventttl import EventTTL

        return [EventTTL(registry, self, config.event_ttl)]

    def cells(self, obj: Obj) -> list[Any]:
        return event_cells(obj)


KIND = Event()
