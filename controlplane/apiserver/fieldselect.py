"""List and watch filters: the labelSelector and fieldSelector of a request as one predicate over
cached objects. The grammar, its errors and the matching are `kubeclient.selectors` (the same code the
clients use); what is kind-specific, the fields a kind lets selectors name, each kind module declares
(`Kind.field_selectors`, and which metadata fields its label conversion accepts, `Kind.field_meta`,
with upstream's text for a label it refuses, `Kind.field_refusal`). The watch cache keeps only the
fields selectors read (`slim_view`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controlplane.apiserver import errors, kinds
from controlplane.apiserver.kinds.base import Kind, SelectableField
from controlplane.storage.cache import Trigger
from kubeclient.selectors import FieldRequirement, Selector, SelectorError, parse_fields, parse_labels

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]


def _at(obj: Obj, parts: tuple[str, ...]) -> Any:
    current: Any = obj
    for part in parts:
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current


Reader = Callable[[Obj], str]


def reader(field: SelectableField) -> Reader:
    """How a selector reads `field` of an object, as upstream's fields.Set holds it (its path split once:
    a selector reads it of every object a list or an unindexed watch weighs)."""
    if not field.exposed:
        return lambda obj: ""
    parts = tuple(field.at.split("."))
    fallback = tuple(field.fallback.split(".")) if field.fallback else ()
    missing = field.missing

    def read(obj: Obj) -> str:
        current = _at(obj, parts)
        if fallback and current in (None, ""):
            current = _at(obj, fallback)
        if current is None:
            return missing
        if isinstance(current, bool):
            return "true" if current else "false"
        return current if type(current) is str else str(current)

    return read


def _fields(kind: Kind, requirements: list[FieldRequirement]) -> list[tuple[SelectableField, bool, str]]:
    known = {f.name: f for f in (*(SelectableField(m) for m in kind.field_meta), *kind.field_selectors)}
    out = []
    for req in requirements:
        field = known.get(req.field)
        if field is None:
            # Go's %q of the label (JSON's quoting agrees for what a selector can hold)
            quoted = json.dumps(req.field, ensure_ascii=False)
            raise errors.bad_request(
                kind.field_refusal.format(label=req.field, quoted=quoted, kind=kind.kind)
            )
        out.append((field, req.equal, req.value))
    return out


def predicate(kind: Kind, label_selector: str, field_selector: str) -> tuple[Predicate | None, str | None]:
    """The filter of a list or watch (None: everything), and the name a `metadata.name=X` pins. The
    filter is a `Selection`: a watch indexes itself by its `trigger`."""
    try:
        labels: Selector = parse_labels(label_selector)
        fields = _fields(kind, parse_fields(field_selector))
    except SelectorError as err:
        raise errors.bad_request(str(err)) from None
    one_name = next((v for f, equal, v in fields if f.at == "metadata.name" and equal), None)
    if labels.empty and not fields:
        return None, one_name
    return Selection(labels, fields), one_name


class Selection:
    """A label and field selector as one predicate over cached objects (their views), and the field
    value it requires, if any (`trigger`): the first `field=value` requirement, by which the watch
    cache routes events to the watch (upstream indexes pod watches by spec.nodeName the same way)."""

    __slots__ = ("labels", "fields", "trigger")

    def __init__(self, labels: Selector, fields: list[tuple[SelectableField, bool, str]]) -> None:
        self.labels = None if labels.empty else labels
        self.fields = tuple((reader(f), equal, value) for f, equal, value in fields)
        self.trigger = next((field_trigger(f, v) for f, equal, v in fields if equal), None)

    def __call__(self, obj: Obj) -> bool:
        if self.labels is not None and not self.labels.matches((obj.get("metadata") or {}).get("labels")):
            return False
        for read, equal, value in self.fields:
            if (read(obj) == value) != equal:
                return False
        return True


def field_trigger(field: SelectableField, value: str) -> Trigger:
    """The trigger of `field=value`: the index key is what reading the field depends on, so that
    spec.host and spec.nodeName (one path) share an index."""
    return Trigger((field.at, field.fallback, field.missing, field.exposed), reader(field), value)


# Paths a selector or the registry reads from cached objects; the watch cache keeps only these decoded.
_VIEW_PATHS = sorted(
    {p for k in kinds.BUILT_IN for f in k.field_selectors if f.exposed for p in (f.at, f.fallback) if p}
    # metadata.uid: bound service-account tokens check their pod's (satokens.py) on every request.
    | {"metadata.name", "metadata.namespace", "metadata.labels", "metadata.deletionTimestamp", "metadata.uid"}
)


# Custom resources keep their whole object as the view: the fields their CRD makes selectable
# (selectableFields) are known only at run time and may change with the CRD.
_BUILT_IN = frozenset(k.api_version for k in kinds.BUILT_IN)


def slim_view(obj: Obj) -> Obj:
    """The part of an object selectors need, so the cache need not keep every object decoded."""
    if obj.get("apiVersion") not in _BUILT_IN:
        return obj
    view: Obj = {}
    for path in _VIEW_PATHS:
        current: Any = obj
        parts = path.split(".")
        for part in parts:
            if not isinstance(current, dict) or part not in current:
                current = None
                break
            current = current[part]
        if current is None:
            continue
        node = view
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = current
    return view
