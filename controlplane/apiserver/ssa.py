"""Field ownership (metadata.managedFields) and server-side apply (application/apply-patch+yaml).

What it does: every write records which fields its manager set, in upstream's FieldsV1 format (list
items keyed by their merge key): Update entries for create/update/patch (per manager and subresource,
taking over the fields they changed), Apply entries for apply. An apply merges the configuration into
the live object with strategic-merge rules, removes fields the same manager applied before and no
longer lists (unless another manager owns them), and fails with 409 Conflict naming each field another
manager owns with a different value, unless force=true, which takes the fields over.
Lists, maps and structs are keyed and owned as upstream's OpenAPI markers say (smp_schema.apply_schema:
list-map keys, sets, atomic lists, maps and structs). What is missing: unions, and a "." marker on maps
and lists themselves; managedFields are kept
for status and main resource alike, and apply on the status subresource is treated like the main one.
"""

from __future__ import annotations

import json
from typing import Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.patch import strategic_merge
from controlplane.apiserver.smp_schema import ATOMIC, OBJECT, ListSpec, Schema, fill_key_defaults
from controlplane.storage.encoding import encode

Obj = dict[str, Any]
_SKIP_META = {
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "name",
    "namespace",
}


def field_set(value: Any, schema: Any) -> Obj:
    """FieldsV1 for `value`: {"f:spec": {"f:containers": {'k:{"name":"c"}': {".": {}, "f:image": {}}}}}."""
    if not isinstance(value, dict):
        return {}
    out: Obj = {}
    for key, sub in value.items():
        sub_schema = schema.get(key) if isinstance(schema, dict) else None
        if isinstance(sub, dict) and sub and sub_schema is not ATOMIC:
            out[f"f:{key}"] = field_set(sub, sub_schema if isinstance(sub_schema, dict) else None)
        elif isinstance(sub, list) and isinstance(sub_schema, ListSpec):
            out[f"f:{key}"] = _list_items(sub, sub_schema)
        else:
            out[f"f:{key}"] = {}
    return out


def _list_items(items: list[Any], spec: ListSpec) -> Obj:
    """The FieldsV1 of a set (`v:` per value) or a map list (`k:` per item's keys; an atomic item is
    owned whole, a granular one field by field under its "." marker)."""
    out: Obj = {}
    for item in items:
        if not spec.keys:
            out["v:" + json.dumps(item, separators=(",", ":"))] = {}
        elif isinstance(item, dict) and len(keys := spec.key_fields(item)) == len(spec.keys):
            ident = "k:" + json.dumps(keys, separators=(",", ":"))
            out[ident] = {} if spec.item is ATOMIC else {".": {}, **field_set(item, spec.item)}
    return out


def reset_fields(has_status: bool, subresource: str) -> frozenset[str]:
    """Top-level fields a write through `subresource` never owns: upstream's strategies reset `status` on
    the main resource of every kind with a status subresource (ResetFieldsFor), so neither an update nor
    an apply there records it (a CRD's applier never owns `.status.acceptedNames`)."""
    return frozenset(("status",)) if has_status and subresource == "" else frozenset()


def _meta_fields(applied: Obj, schema: Schema, reset: frozenset[str] = frozenset()) -> Obj:
    fs = field_set(applied, schema)
    for name in reset:
        fs.pop(f"f:{name}", None)
    meta = fs.get("f:metadata")
    if isinstance(meta, dict):
        for name in _SKIP_META:
            meta.pop(f"f:{name}", None)
        if not meta:
            fs.pop("f:metadata")
    fs.pop("f:apiVersion", None)
    fs.pop("f:kind", None)
    return fs


def _delete_at(obj: Any, path: tuple[str, ...]) -> None:
    """Delete the field or list item a FieldsV1 path names; a missing path is a no-op."""
    if path and path[-1] == ".":
        path = path[:-1]
    if not path:
        return
    parent = value_at(obj, path[:-1])
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        wanted = json.loads(last[2:])
        parent[:] = [
            i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in wanted.items()))
        ]
    elif last.startswith("v:") and isinstance(parent, list):
        value = json.loads(last[2:])
        parent[:] = [i for i in parent if i != value]


Path = tuple[str, ...]


def leaves(fs: Obj, prefix: Path = ()) -> set[Path]:
    """Every owned path; a path ends where the set has no children (or at an item's "." marker)."""
    out: set[Path] = set()
    for key, sub in fs.items():
        path = (*prefix, key)
        if isinstance(sub, dict) and sub:
            out |= leaves(sub, path)
        else:
            out.add(path)
    return out


def _sorted(fs: Obj) -> Obj:
    """A field set with every level's keys in order: what `build(leaves(fs))` makes of it."""
    return {key: _sorted(sub) if isinstance(sub, dict) and sub else {} for key, sub in sorted(fs.items())}


def build(paths: set[Path]) -> Obj:
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(key, {})
    return root


_MISSING = object()


def value_at(obj: Any, path: Path) -> Any:
    """The value a FieldsV1 path points at in `obj` (_MISSING when absent)."""
    current = obj
    for key in path:
        current = _step(current, key)
        if current is _MISSING:
            return _MISSING
    return current


def _step(current: Any, key: str) -> Any:
    """The value one FieldsV1 key names inside `current` (_MISSING when absent)."""
    if key == ".":
        return current
    if key.startswith("f:"):
        if not isinstance(current, dict) or key[2:] not in current:
            return _MISSING
        return current[key[2:]]
    if key.startswith("k:"):
        wanted = json.loads(key[2:])
        if not isinstance(current, list):
            return _MISSING
        return next(
            (i for i in current if isinstance(i, dict) and all(i.get(k) == v for k, v in wanted.items())),
            _MISSING,
        )
    if key.startswith("v:"):
        wanted = json.loads(key[2:])
        if not isinstance(current, list) or wanted not in current:
            return _MISSING
        return wanted
    return current


def _changed(fs: Obj, old: Any, new: Any, prefix: Path, old_paths: set[Path], out: set[Path]) -> None:
    """The leaves of `fs` (new's field set) whose value differs in `old` or that old's set lacks: each
    node is looked up once on the way down, not once per leaf from the root (value_at's walk)."""
    for key, sub in fs.items():
        path = (*prefix, key)
        old_value, new_value = _step(old, key), _step(new, key)
        if isinstance(sub, dict) and sub:
            _changed(sub, old_value, new_value, path, old_paths, out)
        elif path not in old_paths or old_value != new_value:
            out.add(path)


def _object_fields(obj: Obj, schema: Schema, reset: frozenset[str] = frozenset()) -> Obj:
    return _meta_fields(obj, schema, reset)


def _has_leaf(fs: Obj, path: Path) -> bool:
    """Whether `path` is one of the leaves of field set `fs` (`path in leaves(fs)`, without listing them)."""
    node: Any = fs
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return not (isinstance(node, dict) and node)


def _same(a: Any, b: Any) -> bool:
    """Equal and spelled the same in JSON: a field set's `v:`/`k:` keys spell values, and Python's `==`
    takes 1, 1.0 and True for one another."""
    return a is b or (a == b and encode(a) == encode(b))


def changes(
    old: Obj, new: Obj, schema: Schema, reset: frozenset[str] = frozenset()
) -> tuple[set[Path], set[Path]]:
    """The leaves of `new`'s field set whose value differs in `old` or that `old`'s set lacks (changed),
    and those of `old`'s set that `new`'s lacks (gone), as computing both field sets and their leaves
    would give. Walks the two objects together and lists the leaves only where they differ: an update
    changes a few fields of an object (a Lease's renewTime, a pod's status, never its spec), and every
    leaf of the rest would cost a tuple, a set entry and a comparison for nothing."""
    changed: set[Path] = set()
    gone: set[Path] = set()
    skip = frozenset(("apiVersion", "kind", *reset))
    _diff(old, new, schema, (), skip, changed, gone)
    return changed, gone


def _keyed(items: list[Any], spec: ListSpec) -> dict[str, Any] | None:
    """A map list's items by their `k:` name, when that name finds each item as a field-set path does
    (`_step`): a non-empty list of objects each naming every key as a string, no name twice. None:
    anything else (the caller lists the leaves instead)."""
    out: dict[str, Any] = {}
    for item in items:
        if not isinstance(item, dict) or not all(type(item.get(k)) is str for k in spec.keys):
            return None
        out["k:" + json.dumps(spec.key_fields(item), separators=(",", ":"))] = item
    return out if out and len(out) == len(items) else None


def _diff_items(
    olds: dict[str, Any],
    news: dict[str, Any],
    spec: ListSpec,
    path: Path,
    changed: set[Path],
    gone: set[Path],
) -> None:
    """`changes` below a map list, item by item: an item is a leaf (atomic) or its "." (the whole item,
    changed when any of it is) and its fields."""
    for ident, b in news.items():
        a = olds.get(ident)
        at = (*path, ident)
        if a is None:
            changed |= leaves(
                {ident: {} if spec.item is ATOMIC else {".": {}, **field_set(b, spec.item)}}, path
            )
        elif _same(a, b):
            continue
        elif spec.item is ATOMIC:
            if a != b:
                changed.add(at)
        else:
            if a != b:
                changed.add((*at, "."))
            _diff(a, b, spec.item if isinstance(spec.item, dict) else None, at, frozenset(), changed, gone)
    for ident, a in olds.items():
        if ident not in news:
            gone |= leaves({ident: {} if spec.item is ATOMIC else {".": {}, **field_set(a, spec.item)}}, path)


def _diff(
    old: Obj, new: Obj, schema: Any, prefix: Path, skip: frozenset[str], changed: set[Path], gone: set[Path]
) -> None:
    """`changes` below two struct values `old` and `new` (dicts) at field-set path `prefix`."""
    for key in {**old, **new}:
        if key in skip:
            continue
        in_old, in_new = key in old, key in new
        a, b = old.get(key), new.get(key)
        if in_old and in_new:
            if not isinstance(b, dict | list) and not isinstance(a, dict | list):
                if a != b:  # a scalar is a leaf whatever its value: only its value can change
                    changed.add((*prefix, f"f:{key}"))
                continue
            if _same(a, b):
                continue
        sub = schema.get(key) if isinstance(schema, dict) else None
        path = (*prefix, f"f:{key}")
        if key == "metadata" and not prefix:
            # Its system fields are nobody's; metadata itself is never a leaf (_meta_fields).
            _diff(
                a if isinstance(a, dict) else {},
                b if isinstance(b, dict) else {},
                sub,
                path,
                _SKIP_META,
                changed,
                gone,
            )
            continue
        if isinstance(a, dict) and a and isinstance(b, dict) and b and sub is not ATOMIC:
            _diff(a, b, sub if isinstance(sub, dict) else None, path, frozenset(), changed, gone)
            continue
        if isinstance(sub, ListSpec) and sub.keys and isinstance(a, list) and isinstance(b, list):
            olds, news = _keyed(a, sub), _keyed(b, sub)
            if olds is not None and news is not None:
                _diff_items(olds, news, sub, path, changed, gone)
                continue
        # Different in shape or in a list: this key's part of both field sets, compared leaf by leaf.
        new_fs = field_set({key: b}, schema) if in_new else {}
        old_paths = leaves(field_set({key: a}, schema), prefix) if in_old else set()
        if in_new:
            _changed(new_fs, old, new, prefix, old_paths, changed)
        gone |= old_paths - leaves(new_fs, prefix)


def _entry(manager: str, operation: str, api_version: str, fields: Obj, subresource: str = "") -> Obj:
    entry: Obj = {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": timestamp(),
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def track_update(
    old: Obj | None,
    new: Obj,
    manager: str,
    subresource: str = "",
    schema: Schema = OBJECT,
    reset: frozenset[str] = frozenset(),
) -> None:
    """Record an Update by `manager`: it now owns every field it changed; others lose those fields."""
    meta = new.setdefault("metadata", {})
    managed = [dict(m) for m in ((old or {}).get("metadata") or {}).get("managedFields") or []]
    if old is None:
        fields = _object_fields(new, schema, reset)
        if not managed:  # a create: the manager owns every field it set
            if fields:
                meta["managedFields"] = [
                    _entry(manager, "Update", new.get("apiVersion", ""), _sorted(fields), subresource)
                ]
            return
        changed, gone = leaves(fields), set()
    else:
        changed, gone = changes(old, new, schema, reset)
    if not changed and not gone:
        if managed:
            meta["managedFields"] = managed
        return
    kept = []
    mine = None
    taken = changed | gone
    for m in managed:
        fs = m.get("fieldsV1") or {}
        if (
            m.get("manager") == manager
            and m.get("operation") == "Update"
            and m.get("subresource", "") == subresource
        ):
            mine = leaves(fs)
            continue
        if not any(_has_leaf(fs, path) for path in taken):
            # Nothing of it taken: what rebuilding it from its leaves gives, without listing them.
            if fs:
                kept.append({**m, "fieldsV1": _sorted(fs)})
            continue
        paths = leaves(fs) - taken
        if paths:
            kept.append({**m, "fieldsV1": build(paths)})
    owned = ((mine or set()) - gone) | changed
    kept.append(_entry(manager, "Update", new.get("apiVersion", ""), build(owned), subresource))
    meta["managedFields"] = kept


def _conflicts(
    live: Obj, applied: Obj, new_paths: set[Path], managed: list[Obj], manager: str
) -> list[tuple[Obj, Path]]:
    out = []
    for m in managed:
        if m.get("manager") == manager and m.get("operation") == "Apply":
            continue
        for path in sorted(leaves(m.get("fieldsV1") or {}) & new_paths):
            if path[-1] == ".":
                continue
            if value_at(live, path) != value_at(applied, path):
                out.append((m, path))
    return out


def _dotted(path: Path) -> str:
    """A FieldsV1 path as structured-merge-diff prints it: `.spec.containers[name="c"].image`, a set
    member `[=value]`; key and set values in JSON."""
    parts = []
    for key in path:
        if key.startswith("f:"):
            parts.append("." + key[2:])
        elif key.startswith("k:"):
            keys = json.loads(key[2:])
            parts.append("[" + ",".join(f"{k}={_json(keys[k])}" for k in sorted(keys)) + "]")
        elif key.startswith("v:"):
            parts.append("[=" + _json(json.loads(key[2:])) + "]")
    return "".join(parts)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _manager_id(entry: Obj) -> str:
    """Upstream's manager identifier: the entry without fields and time (and without apiVersion for an
    applier), encoded; conflicts are grouped and sorted by it."""
    ident: Obj = {"manager": entry.get("manager", ""), "operation": entry.get("operation", "")}
    if entry.get("operation") != "Apply":
        ident["apiVersion"] = entry.get("apiVersion", "")
    if entry.get("subresource"):
        ident["subresource"] = entry["subresource"]
    return _json(ident)


def _printed_manager(entry: Obj) -> str:
    """How upstream names a manager in a conflict: `"name"`, `with subresource "status"`, and for an
    updater the API version it wrote with."""
    out = _json(entry.get("manager", ""))
    if entry.get("subresource"):
        out += f" with subresource {_json(entry['subresource'])}"
    if entry.get("operation") == "Update":
        out += f" using {entry.get('apiVersion', '')}"
    return out


def conflict_error(conflicts: list[tuple[Obj, Path]]) -> ApiError:
    """409 Conflict in upstream's words: one conflict on one line, several grouped by manager."""
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {_printed_manager(m)}",
            "field": _dotted(p),
        }
        for m, p in conflicts
    ]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {_printed_manager(manager)}: {_dotted(path)}"
    else:
        grouped: dict[str, tuple[Obj, list[Path]]] = {}
        for manager, path in conflicts:
            grouped.setdefault(_manager_id(manager), (manager, []))[1].append(path)
        lines = []
        for ident in sorted(grouped):
            manager, paths = grouped[ident]
            lines.append(f"conflicts with {_printed_manager(manager)}:")
            lines += [f"- {_dotted(p)}" for p in paths]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


def apply(
    current: Obj | None,
    applied: Obj,
    manager: str,
    force: bool = False,
    schema: Schema = OBJECT,
    reset: frozenset[str] = frozenset(),
) -> Obj:
    """The object after `manager` applies `applied` to `current` (None: create); `schema`: the kind's
    apply schema (smp_schema.apply_schema); `reset`: top-level fields the applier never owns (reset_fields)."""
    applied = json.loads(json.dumps(applied))
    fill_key_defaults(applied, schema)
    new_fields = _meta_fields(applied, schema, reset)
    entry = _entry(manager, "Apply", applied.get("apiVersion", ""), new_fields)
    if current is None:
        result = json.loads(json.dumps(applied))
        result.setdefault("metadata", {})["managedFields"] = [entry]
        return result
    managed = [dict(m) for m in (current.get("metadata") or {}).get("managedFields") or []]
    new_paths = leaves(new_fields)
    conflicts = _conflicts(current, applied, new_paths, managed, manager)
    if conflicts and not force:
        raise conflict_error(conflicts)
    previous = next(
        (m for m in managed if m.get("manager") == manager and m.get("operation") == "Apply"), None
    )
    others = set()
    for m in managed:
        if m is not previous:
            others |= leaves(m.get("fieldsV1") or {})
    result = json.loads(json.dumps(strategic_merge(current, applied, schema, ordered=False)))
    if previous is not None:
        stale = leaves(previous.get("fieldsV1") or {}) - new_paths
        # Deepest first; of one depth a whole item (its ".") before its fields, which may be its keys.
        for path in sorted(stale, key=lambda p: (len(p), p[-1] == ".", p), reverse=True):
            item = path[:-1] if path[-1] == "." else path
            if _is_key_field(path):
                continue  # an item that stays keeps its keys
            # Keep what another manager still owns (an item with someone else's fields in it stays),
            # and a map this apply fills again (applied empty before, so owned as a leaf).
            if any(other[: len(item)] == item for other in others | new_paths):
                continue
            _delete_at(result, path)
    if previous is not None and not conflicts and _unchanged(current, result, previous, entry):
        # Nothing changes: the managed fields stay as they were (no new timestamp), so the store is
        # not written and no watch event goes out, as upstream's apply of the same configuration.
        result["metadata"]["managedFields"] = managed
        return result
    taken = {path for _, path in conflicts}
    kept = []
    for m in managed:
        if m is previous:
            continue
        paths = leaves(m.get("fieldsV1") or {}) - taken
        if paths:
            kept.append({**m, "fieldsV1": build(paths)})
    kept.append(entry)
    result.setdefault("metadata", {})["managedFields"] = kept
    return result


def _is_key_field(path: Path) -> bool:
    """The path names one of its list item's key fields (`k:{"name":"c"}` / `f:name`)."""
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    return path[-1][2:] in json.loads(path[-2][2:])


def _unchanged(current: Obj, result: Obj, previous: Obj, entry: Obj) -> bool:
    """The apply leaves the object as it was and the applier owns what it owned, from the same version."""

    def bare(obj: Obj) -> Obj:
        meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
        return {**obj, "metadata": meta}

    return (
        previous.get("fieldsV1") == entry["fieldsV1"]
        and previous.get("apiVersion") == entry["apiVersion"]
        and bare(current) == bare(result)
    )
