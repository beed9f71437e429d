"""A CRD version's `selectableFields` (GA in 1.32): the fields of its objects that field selectors may
name in lists and watches of that version, beyond metadata.name (and metadata.namespace when the
resource is namespaced). Validated at CRD create and update as upstream's
ValidateCustomResourceSelectableFields: each jsonPath resolves through the version's schema (upstream's
CEL field path rules, without array notation), not into metadata, to a string, boolean or integer; no
path twice; at most 8."""

from __future__ import annotations

import re
from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, invalid, required, too_many
from controlplane.apiserver.kinds.base import SelectableField

Obj = dict[str, Any]
MAX_SELECTABLE_FIELDS = 8
_TOKENS = re.compile(r"[.\[\]]|[^.\[\]]+")
_ALLOWED_TYPES = ("string", "boolean", "integer")


class _PathError(Exception):
    pass


def _resolve(json_path: str, schema: Obj) -> tuple[list[str], Obj]:
    """The field names a jsonPath walks and the schema it ends at (upstream's cel.ValidFieldPath)."""
    names: list[str] = []
    tokens = iter(_TOKENS.findall(json_path))
    for token in tokens:
        if token == "[":
            raise _PathError("array notation is not allowed")
        if token != ".":
            raise _PathError(f"expected [ or . but got: {token}")
        name = next(tokens, None)
        if name is None:
            raise _PathError("unexpected end of JSON path")
        properties = schema.get("properties") or {}
        if name not in properties:
            raise _PathError("does not refer to a valid field")
        names.append(name)
        schema = properties[name] or {}
    return names, schema


def errors(version: Obj, path: str) -> list[FieldError]:
    """The FieldErrors of one version's selectableFields (`path`: that version's field path)."""
    fields = version.get("selectableFields") or []
    schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    at = f"{path}.selectableFields"
    errs: list[FieldError] = []
    unique: set[str] = set()
    for i, field in enumerate(fields):
        json_path = (field or {}).get("jsonPath") or ""
        where = f"{at}[{i}].jsonPath"
        if not json_path:
            errs.append(required(where))
            continue
        try:
            names, found = _resolve(json_path, schema)
        except _PathError as err:
            errs.append(invalid(where, json_path, f"is an invalid path: {err}"))
            continue
        if names[:1] == ["metadata"]:
            errs.append(invalid(where, json_path, "must not point to fields in metadata"))
        if found.get("type") not in _ALLOWED_TYPES:
            errs.append(
                invalid(
                    where,
                    json_path,
                    "must point to a field of type string, boolean or integer. "
                    "Enum string fields and strings with formats are allowed.",
                )
            )
        key = ".".join(names)
        if key in unique:
            errs.append(duplicate(where, json_path))
        unique.add(key)
    if len(unique) > MAX_SELECTABLE_FIELDS:
        errs.append(too_many(at, len(unique), MAX_SELECTABLE_FIELDS))
    return errs


def selectable_fields(version: Obj) -> tuple[SelectableField, ...]:
    """The field selector labels a version's selectableFields add: the jsonPath without its leading dot,
    read at that path (a missing field reads as "", as upstream's fields.Set lookup)."""
    out = []
    for field in version.get("selectableFields") or []:
        name = ((field or {}).get("jsonPath") or "").lstrip(".")
        if name:
            out.append(SelectableField(name))
    return tuple(out)
