"""node.k8s.io/v1 RuntimeClass: names a container runtime configuration (the CRI handler) pods may
ask for, with its pod overhead and scheduling constraints."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.podspec import validate_resources
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_label, immutable, labels

Obj = dict[str, Any]


class RuntimeClass(Kind):
    group = "node.k8s.io"
    kind = "RuntimeClass"
    plural = "runtimeclasses"
    namespaced = False
    schema = "V1RuntimeClass"
    type_marks = {("V1Overhead", "podFixed"): "map[quantity]"}
    columns = (tables.NAME, tables.column("Handler"), tables.AGE)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors = dns_label("handler", obj.get("handler", ""))
        overhead = obj.get("overhead")
        if overhead is not None:
            # upstream reuses the container resource rules, as limits
            errors += validate_resources("overhead", {"limits": overhead.get("podFixed") or {}})
        scheduling = obj.get("scheduling") or {}
        errors += labels("scheduling.nodeSelector", scheduling.get("nodeSelector"))
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return immutable("handler", new.get("handler"), old.get("handler"))

    def cells(self, obj: Obj) -> list[Any]:
        return [obj["metadata"].get("name"), obj.get("handler", ""), age(obj)]


KIND = RuntimeClass()
