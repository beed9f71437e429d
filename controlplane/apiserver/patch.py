"""The patch types: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge needs to know, per field, whether a list is merged by a key (containers by name, ports
by containerPort, conditions by type, ...) or replaced. `smp_schema.py` builds those facts from upstream's
OpenAPI markers; server-side apply merges with the same function over its own view of them (lists keyed
by all their list-map keys, atomic maps replaced whole). This module only applies them, including the directives kubectl sends
($patch, $retainKeys, $setElementOrder/..., $deleteFromPrimitiveList/...).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from controlplane.apiserver.errors import ApiError, bad_request
from controlplane.apiserver.smp_schema import ATOMIC, ListSpec, Schema

# JSON's scalars: deepcopy hands each back as it is, after a dispatch and a memo per call (a status
# patch has dozens of them).
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _copy(value: Any) -> Any:
    """copy.deepcopy of a JSON value, without deepcopy's machinery for the scalars it returns as they are."""
    return value if type(value) in _SCALARS else copy.deepcopy(value)


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- JSON patch -----------------------------------------------------------------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f'json patch: invalid path "{path}"')
    return [_unescape(t) for t in path[1:].split("/")]


def _walk(doc: Any, tokens: list[str], path: str) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise _unprocessable(f'doc is missing path: "{path}": missing value')
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, path, allow_end=False)]
        else:
            raise _unprocessable(f'doc is missing path: "{path}"')
    return doc


def _index(container: list[Any], token: str, path: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    try:
        index = int(token)
    except ValueError:
        raise _unprocessable(f'invalid array index "{token}" in "{path}"') from None
    limit = len(container) if allow_end else len(container) - 1
    if index < 0 or index > limit:
        raise _unprocessable(f'unable to access invalid index: {index} in "{path}"')
    return index


def _unprocessable(message: str) -> ApiError:
    return ApiError(
        422, "Invalid", f"the server rejected our request due to an error in our request: {message}"
    )


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise _unprocessable(f'doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _unprocessable("cannot remove the whole document")
    parent = _walk(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"Unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, path, allow_end=False))
    raise _unprocessable(f'doc is missing path: "{path}"')


def json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("json patch must be a JSON array of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request('json patch: each operation must be an object with an "op"')
        kind = op["op"]
        path = op.get("path", "")
        if not isinstance(path, str):
            raise bad_request("json patch: path must be a string")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            tokens = _pointer(path)
            if not tokens:
                doc = copy.deepcopy(op.get("value"))
                continue
            _walk(doc, tokens, path)  # must exist
            _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind in ("move", "copy"):
            source = op.get("from", "")
            value = copy.deepcopy(_walk(doc, _pointer(source), source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if not same_json(_walk(doc, _pointer(path), path), op.get("value")):
                raise _unprocessable(f"testing value {path} failed")
        else:
            raise bad_request(f'json patch: unexpected kind of operation: "{kind}"')
    return doc


def same_json(a: Any, b: Any) -> bool:
    """Equality as json-patch's `test` sees it: values of different JSON types never match (Python's
    `1 == True` and `1 == 1.0` do not carry over: upstream compares the compacted JSON text)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# --- strategic merge patch ---------------------------------------------------------------------------

_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def strategic_merge(original: Any, patch: Any, schema: Schema | None, ordered: bool = True) -> Any:
    """Apply a strategic merge patch to `original` (not modified) and return the result. `ordered`:
    list items in the order upstream's strategic merge gives them (_normalize); server-side apply, whose
    merge keeps live items first and appends new ones, passes False."""
    if not isinstance(patch, dict):
        return _copy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result: dict[str, Any] = dict(original) if isinstance(original, dict) else {}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith(_ORDER):
            orders[key[len(_ORDER) :]] = value if isinstance(value, list) else []
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = schema.get(key) if isinstance(schema, dict) else None
        if isinstance(value, dict) and sub is ATOMIC:
            result[key] = copy.deepcopy(value)
        elif isinstance(value, dict):
            merged = strategic_merge(result.get(key), value, sub if isinstance(sub, dict) else None, ordered)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(sub, ListSpec):
            result[key] = _merge_list(result.get(key) or [], value, sub, ordered)
        else:
            result[key] = _copy(value)
    for field, order in orders.items():
        sub = schema.get(field) if isinstance(schema, dict) else None
        if isinstance(result.get(field), list) and isinstance(sub, ListSpec):
            live = original.get(field) if isinstance(original, dict) else None
            result[field] = _normalize(result[field], order, live if isinstance(live, list) else [], sub)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: list[Any], patch: list[Any], spec: ListSpec, ordered: bool = True) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if spec.merge_key is None:
        # A primitive list with the merge strategy (finalizers): the union.
        out = list(original)
        for item in patch:
            if item not in out:
                out.append(_copy(item))
        return _normalize(out, patch, original, spec) if ordered else out
    result = list(original)
    idents = [spec.identity(cur) for cur in result]  # result's identities, kept in step with it
    kept = []
    for item in patch:
        ident = spec.identity(item)
        position = next((i for i, cur in enumerate(idents) if cur == ident), None)
        if isinstance(item, dict) and item.get("$patch") == "delete":
            if position is not None:
                result.pop(position)
                idents.pop(position)
            continue
        kept.append(item)
        if position is None:
            result.append(strategic_merge({}, item, spec.item, ordered))
            idents.append(spec.identity(result[-1]))
        else:
            result[position] = strategic_merge(result[position], item, spec.item, ordered)
            idents[position] = spec.identity(result[position])
    if not ordered:
        return result
    live = [
        o
        for o, own in zip(original, map(spec.identity, original), strict=True)
        if any(own == r for r in idents)
    ]
    return _normalize(result, kept, live, spec)


def _rank_key(ident: Any) -> str:
    """Identities (merge key values, or whole items) may be any JSON value; rank them by their text."""
    return json.dumps(ident, sort_keys=True)


def _normalize(merged: list[Any], order: list[Any], live: list[Any], spec: ListSpec) -> list[Any]:
    """Upstream's normalizeElementOrder: the items the patch names (or its $setElementOrder lists) in the
    patch's order, the live object's other items in their live order, then both interleaved: a live item
    goes first only when both stand in the live list and it stood before. So an item the patch adds
    comes before the live items it is compared with (a container added by a patch comes first)."""

    keys: dict[int, str] = {}  # by the item's id: each item's identity is written out once

    def key(item: Any) -> str:
        found = keys.get(id(item))
        if found is None:
            found = keys[id(item)] = _rank_key(spec.identity(item))
        return found

    def positions(items: list[Any]) -> dict[str, int]:
        out: dict[str, int] = {}
        for i, item in enumerate(items):
            out.setdefault(key(item), i)
        return out

    wanted, served = positions(order), positions(live)
    patched = sorted((m for m in merged if key(m) in wanted), key=lambda m: wanted[key(m)])
    server_only = sorted(
        (m for m in merged if key(m) not in wanted), key=lambda m: served.get(key(m), len(served))
    )
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patched):
        if j >= len(patched):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patched[j])
            j += 1
        else:
            left, right = served.get(key(server_only[i])), served.get(key(patched[j]))
            if left is not None and right is not None and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patched[j])
                j += 1
    return out
