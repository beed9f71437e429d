"""How the served types' lists and maps merge, built from upstream's OpenAPI markers (mergemarkers.json,
written by gen_mergemarkers.py), never typed by hand.

Two views of one table, walked from a kind's root type:
- `patch_schema`: strategic merge patch's (x-kubernetes-patch-strategy / -patch-merge-key, Go's struct
  tags): a list merges only with the merge strategy, by its one merge key (a container's ports by
  containerPort); every other list is replaced whole;
- `apply_schema`: server-side apply's (structured-merge-diff, as kube-openapi's schemaconv converts the
  markers): x-kubernetes-list-type map lists merge by all their list-map keys (ports by containerPort and
  protocol), sets by value, atomic lists and x-kubernetes-map-type atomic maps and structs (selectors,
  LabelSelector, ObjectReference) are owned and replaced whole; an unmarked list with the merge strategy
  merges by its merge key, any other list is atomic.
A Schema maps a field to a nested Schema, a ListSpec or ATOMIC; fields not named are plain values.
Custom resources build theirs from their own schema's markers (apiextensions/resource.py).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Atomic:
    """A map or struct owned and replaced as one value."""


ATOMIC = Atomic()


@dataclass(frozen=True)
class ListSpec:
    """A list merged by its items' `keys` (none: a set, merged by value); `item`: the items' schema;
    `defaults`: key values an item that leaves the key out stands for (upstream's `+default`)."""

    keys: tuple[str, ...]
    item: Any = None
    defaults: tuple[tuple[str, Any], ...] = ()

    @property
    def merge_key(self) -> str | None:
        return self.keys[0] if self.keys else None

    def identity(self, item: Any) -> Any:
        """What tells two items apart: the key values (a tuple), or the item itself in a set."""
        if not self.keys:
            return item
        if not isinstance(item, dict):
            return None
        defaults = dict(self.defaults)
        return tuple(item.get(k, defaults.get(k)) for k in self.keys)

    def key_fields(self, item: dict[str, Any]) -> dict[str, Any]:
        """The item's keys as FieldsV1 names them (`k:{"containerPort":53,"protocol":"UDP"}`), sorted by
        name as structured-merge-diff sorts them; a missing key with a default takes the default."""
        defaults = dict(self.defaults)
        return {k: item.get(k, defaults.get(k)) for k in sorted(self.keys) if k in item or k in defaults}


# field -> nested schema (a dict), a ListSpec or ATOMIC
Schema = dict[str, Any]

_TABLE = resources.files("controlplane.apiserver") / "mergemarkers.json"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@functools.cache
def _table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(_TABLE.read_text())
    return table


def markers(type_name: str) -> dict[str, Any]:
    """Upstream's markers of one type, as the table holds them ({} for a type without any)."""
    found: dict[str, Any] = _table()["types"].get(type_name, {})
    return found


def root_type(group: str, version: str, kind: str) -> str | None:
    """The definition name of a group/version/kind (None: not one of upstream's types)."""
    name: str | None = _table()["kinds"].get(f"{group}/{version}/{kind}")
    return name


def _patch_list(entry: dict[str, Any], build: Any) -> ListSpec | None:
    if "merge" not in str(entry.get("strategy", "")).split(","):
        return None
    key = entry.get("mergeKey")
    return ListSpec((key,) if key else (), build(entry["items"]) if "items" in entry else None)


def _apply_list(entry: dict[str, Any], build: Any) -> ListSpec | None:
    list_type = entry.get("list")
    keys: tuple[str, ...]
    if list_type == "map":
        keys = tuple(entry.get("keys") or ())
    elif list_type == "set":
        keys = ()
    elif list_type is None and "merge" in str(entry.get("strategy", "")).split(","):
        keys = (entry["mergeKey"],) if entry.get("mergeKey") else ()
    else:
        return None
    item = build(entry["items"]) if "items" in entry else None
    return ListSpec(keys, item, tuple(sorted((entry.get("defaults") or {}).items())))


def _build(type_name: str, apply: bool, memo: dict[str, Any]) -> Any:
    """The schema of one type; `memo` holds the types being built, so recursive types close on
    themselves (JSONSchemaProps) instead of recursing for ever."""
    if type_name in memo:
        return memo[type_name]
    t = markers(type_name)
    if t.get("atomic"):
        memo[type_name] = ATOMIC if apply else {}
        return memo[type_name]
    out: Schema = {}
    memo[type_name] = out

    def build(name: str) -> Any:
        return _build(name, apply, memo)

    for field, entry in (t.get("fields") or {}).items():
        if "list" in entry or "strategy" in entry or "items" in entry:
            spec = _apply_list(entry, build) if apply else _patch_list(entry, build)
            if spec is not None:
                out[field] = spec
        elif apply and entry.get("map") == "atomic":
            out[field] = ATOMIC
        elif "ref" in entry:
            sub = build(entry["ref"])
            if sub is ATOMIC and entry.get("map") == "granular":
                sub = {}  # the field's own marker overrides its type's (PersistentVolume's claimRef)
            if sub or sub is ATOMIC:
                out[field] = sub
    return out


@functools.cache
def patch_schema(group: str, version: str, kind: str) -> Schema:
    """Strategic merge patch's schema of a served kind (metadata's alone for a kind upstream lacks)."""
    name = root_type(group, version, kind) or _OBJECT_META
    schema = _build(name, False, {})
    return schema if name != _OBJECT_META else {"metadata": schema}


@functools.cache
def apply_schema(group: str, version: str, kind: str) -> Schema:
    """Server-side apply's schema of a served kind (metadata's alone for a kind upstream lacks)."""
    name = root_type(group, version, kind) or _OBJECT_META
    schema = _build(name, True, {})
    return schema if name != _OBJECT_META else {"metadata": schema}


def object_schema() -> Schema:
    """What any object has: metadata's finalizers (a set) and ownerReferences (keyed by uid)."""
    return {"metadata": _build(_OBJECT_META, True, {})}


def fill_key_defaults(value: Any, schema: Any) -> None:
    """Write the defaults of list-map keys into the items that leave them out (in place), so an applied
    port without a protocol is the TCP port, as structured-merge-diff keys it."""
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return
    for field, sub in schema.items():
        child = value.get(field)
        if isinstance(sub, ListSpec) and isinstance(child, list):
            for item in child:
                if isinstance(item, dict):
                    for key, default in sub.defaults:
                        item.setdefault(key, default)
                    fill_key_defaults(item, sub.item)
        elif isinstance(sub, dict):
            fill_key_defaults(child, sub)


# The schema of a kind upstream does not define: what any object's metadata has.
OBJECT: Schema = object_schema()
