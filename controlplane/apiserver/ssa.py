"""Server-side apply (application/apply-patch+yaml), in a reduced form.

What it does: the applied configuration is merged into the live object with strategic-merge rules, the
manager's field set is recorded in metadata.managedFields (upstream's FieldsV1 format, list items keyed
by their merge key), and fields the same manager applied before but no longer lists are removed.
What is missing (and why): conflict detection between managers (409 with per-field conflicts) and
`force`, ownership transfer for non-apply updates, and managedFields entries for Update operations; they
need a full structured-merge-diff implementation, which comes with RBAC-era controllers.
"""

from __future__ import annotations

import json
from typing import Any

from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.patch import strategic_merge
from controlplane.apiserver.smp_schema import ListSpec, schema_for

Obj = dict[str, Any]
_SKIP_META = {"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "name", "namespace"}


def field_set(value: Any, schema: Any) -> Obj:
    """FieldsV1 for `value`: {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}}."""
    if not isinstance(value, dict):
        return {}
    out: Obj = {}
    for key, sub in value.items():
        sub_schema = schema.get(key) if isinstance(schema, dict) else None
        if isinstance(sub, dict) and sub:
            out[f"f:{key}"] = field_set(sub, sub_schema if isinstance(sub_schema, dict) else None)
        elif isinstance(sub, list) and isinstance(sub_schema, ListSpec):
            items: Obj = {}
            for item in sub:
                if sub_schema.merge_key is None:
                    items["v:" + json.dumps(item, separators=(",", ":"))] = {}
                elif isinstance(item, dict) and sub_schema.merge_key in item:
                    ident = "k:" + json.dumps({sub_schema.merge_key: item[sub_schema.merge_key]}, separators=(",", ":"))
                    items[ident] = {".": {}, **field_set(item, sub_schema.item)}
            out[f"f:{key}"] = items
        else:
            out[f"f:{key}"] = {}
    return out


def _meta_fields(applied: Obj) -> Obj:
    fs = field_set(applied, schema_for(applied.get("kind", "")))
    meta = fs.get("f:metadata")
    if isinstance(meta, dict):
        for name in _SKIP_META:
            meta.pop(f"f:{name}", None)
        if not meta:
            fs.pop("f:metadata")
    fs.pop("f:apiVersion", None)
    fs.pop("f:kind", None)
    return fs


def _remove(target: Any, stale: Obj, current: Obj, schema: Any) -> None:
    """Delete from `target` the fields in `stale` that `current` (the new field set) no longer has."""
    if not isinstance(target, dict):
        return
    for key, sub in stale.items():
        if not key.startswith("f:"):
            continue
        name = key[2:]
        sub_schema = schema.get(name) if isinstance(schema, dict) else None
        if key not in current:
            target.pop(name, None)
            continue
        value = target.get(name)
        if isinstance(value, list) and isinstance(sub_schema, ListSpec):
            keep = []
            for item in value:
                if sub_schema.merge_key is None:
                    ident = "v:" + json.dumps(item, separators=(",", ":"))
                elif isinstance(item, dict):
                    ident = "k:" + json.dumps({sub_schema.merge_key: item.get(sub_schema.merge_key)}, separators=(",", ":"))
                else:
                    ident = ""
                if ident in sub and ident not in current[key]:
                    continue
                if ident in sub and isinstance(item, dict):
                    _remove(item, sub[ident], current[key][ident], sub_schema.item)
                keep.append(item)
            target[name] = keep
        elif isinstance(value, dict) and sub:
            _remove(value, sub, current[key], sub_schema if isinstance(sub_schema, dict) else None)


def apply(current: Obj | None, applied: Obj, manager: str) -> Obj:
    """The object after `manager` applies `applied` to `current` (None: create)."""
    kind = applied.get("kind", "")
    schema = schema_for(kind)
    new_fields = _meta_fields(applied)
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": applied.get("apiVersion", ""),
        "time": timestamp(),
        "fieldsType": "FieldsV1",
        "fieldsV1": new_fields,
    }
    if current is None:
        result = json.loads(json.dumps(applied))
        result.setdefault("metadata", {})["managedFields"] = [entry]
        return result
    managed = list((current.get("metadata") or {}).get("managedFields") or [])
    previous = next((m for m in managed if m.get("manager") == manager and m.get("operation") == "Apply"), None)
    result = strategic_merge(current, applied, schema)
    if previous is not None:
        _remove(result, previous.get("fieldsV1") or {}, new_fields, schema)
    managed = [m for m in managed if m is not previous]
    managed.append(entry)
    result.setdefault("metadata", {})["managedFields"] = managed
    return result
