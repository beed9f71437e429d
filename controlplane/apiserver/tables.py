"""Table output (`as=Table;g=meta.k8s.io;v=v1`): the generic part. Each kind module declares its columns
and the function that fills a row (upstream's printers.go, one handler per kind); this module turns them
into the metav1.Table kubectl prints, so `kubectl get` shows the same columns and cells against us as
against a real cluster. Rows always carry the wide cells; kubectl hides priority-1 columns unless -o wide.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.meta import age, human_duration, now, parse_time
from kubeclient.selectors import format_label_selector

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority, description
Cells = Callable[[Obj], list[Any]]

NAME: Column = ("Name", "string", 0, "Name must be unique within a namespace.")
AGE: Column = (
    "Age",
    "string",
    0,
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
)
CREATED_AT: Column = ("Created At", "date", 0, AGE[3])
TEMPLATE_CONTAINERS: Column = ("Containers", "string", 1, "Names of each container in the template.")
TEMPLATE_IMAGES: Column = ("Images", "string", 1, "Images referenced by each container in the template.")


def column(name: str, priority: int = 0, kind: str = "string", desc: str = "") -> Column:
    return (name, kind, priority, desc)


def since(value: str | None) -> str:
    when = parse_time(value)
    return human_duration(now() - when) if when else "<unknown>"


def format_selector(selector: Obj | None) -> str:
    """A LabelSelector as kubectl prints it (`app=web,tier in (a,b)`), `<none>` when empty."""
    return format_label_selector(selector)


def format_labels(labels: Obj | None) -> str:
    """labels.FormatLabels: sorted `k=v` pairs, `<none>` when there are none."""
    if not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def containers_images(pod_spec: Obj) -> tuple[str, str]:
    """layoutContainerCells: the names and the images of a pod spec's containers, comma separated."""
    containers = [c for c in pod_spec.get("containers") or [] if isinstance(c, dict)]
    return ",".join(c.get("name", "") for c in containers), ",".join(c.get("image", "") for c in containers)


def name_and_age(obj: Obj) -> list[Any]:
    return [obj["metadata"].get("name"), age(obj)]


def name_and_created(obj: Obj) -> list[Any]:
    """The default row of kinds without a printer upstream: name and creation time."""
    return [obj["metadata"].get("name"), obj["metadata"].get("creationTimestamp")]


def _column_defs(columns: tuple[Column, ...]) -> list[Obj]:
    return [
        {
            "name": name,
            "type": kind,
            "format": "name" if name == "Name" and priority == 0 else "",
            "description": desc,
            "priority": priority,
        }
        for name, kind, priority, desc in columns
    ]


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    kind: Kind,
    objects: list[Obj],
    include: str = "Metadata",
    list_meta: Obj | None = None,
    headers: bool = True,
) -> Obj:
    """The Table of `objects` (in their stored form) with `kind`'s columns."""
    rows = []
    for obj in objects:
        row: Obj = {"cells": kind.cells(obj)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta or {},
        "columnDefinitions": _column_defs(kind.columns) if headers else [],
        "rows": rows,
    }
