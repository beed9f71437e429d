"""apps/v1 ControllerRevision: an immutable snapshot of a controller's state (StatefulSets and
DaemonSets keep their history in them); `data` is free-form JSON."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import immutable, nonnegative

Obj = dict[str, Any]


def controller_of(obj: Obj) -> str:
    """`kind.group/name` of the owner that is the controller (formatResourceName), `<none>` without one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            kind, name = ref.get("kind", ""), ref.get("name", "")
            group = ref.get("apiVersion", "").rpartition("/")[0]
            if not kind:
                return name
            return f"{kind}.{group}".lower() + f"/{name}" if group else f"{kind.lower()}/{name}"
    return "<none>"


class ControllerRevision(Kind):
    group = "apps"
    kind = "ControllerRevision"
    plural = "controllerrevisions"
    schema = "V1ControllerRevision"
    columns = (
        tables.NAME,
        tables.column("Controller", desc="Controller of the object"),
        tables.column("Revision", desc="Revision indicates the revision of the state represented by Data."),
        tables.AGE,
    )

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors = [required("data", "data is mandatory")] if obj.get("data") is None else []
        return errors + nonnegative("revision", obj.get("revision", 0))

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable("data", new.get("data"), old.get("data"))

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), controller_of(obj), obj.get("revision", 0), age(obj)]


KIND = ControllerRevision()
