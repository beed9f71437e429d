"""Upstream's structural-schema check (apiextensions-apiserver pkg/apiserver/schema/validation.go) and the
OpenAPI v3 restrictions a CRD schema lives under (pkg/apis/apiextensions/validation).

A schema is structural when every field and array it specifies has a type outside value validations
(allOf/anyOf/oneOf/not), the junctors only restrict values, metadata at the root restricts at most name
and generateName, and additionalProperties never sits at the root. Each violation is its own
FieldError, sorted by text as upstream sorts them, so a 422 lists every one.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.apiextensions.patterns import pattern_error
from controlplane.apiserver.apiextensions.schema import EMBEDDED, INT_OR_STRING, PRESERVE
from controlplane.apiserver.errors import FieldError, forbidden, invalid, required

Obj = dict[str, Any]
ROOT, ITEM, FIELD = "root", "item", "field"
_EMPTY_TYPE = {
    ROOT: "must not be empty at the root",
    ITEM: "must not be empty for specified array items",
    FIELD: "must not be empty for specified object fields",
}
_JUNCTORS = ("allOf", "anyOf", "oneOf")
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
# What a value validation (inside a junctor) may not say, and upstream's words for it.
_NESTED_FORBIDDEN: tuple[tuple[str, str], ...] = (
    ("type", "must be empty to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("externalDocs", "must be undefined to be structural"),
    (PRESERVE, "must be false to be structural"),
    (EMBEDDED, "must be false to be structural"),
    (INT_OR_STRING, "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def _key(path: str, name: str) -> str:
    return f"{path}.properties[{name}]"


def check(schema: Any, path: str) -> list[FieldError]:
    """Every reason `schema` (a CRD version's openAPIV3Schema, at `path`) is not structural or not
    allowed, sorted as upstream sorts them."""
    if not isinstance(schema, dict):
        return [required(path, "")]
    errors: list[FieldError] = []
    _openapi_restrictions(schema, path, errors)
    _invariants(schema, ROOT, path, errors)
    return sorted(errors, key=lambda e: f"{e.field}: {e.detail}")


def _openapi_restrictions(s: Obj, path: str, errors: list[FieldError]) -> None:
    """specStandardValidatorV3 and the mutual exclusions, over every subschema."""
    if s.get("uniqueItems") is True:
        errors.append(
            forbidden(
                f"{path}.uniqueItems",
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            )
        )
    for field, text in (
        ("$ref", "$ref is not supported"),
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
    ):
        if s.get(field):
            errors.append(forbidden(f"{path}.{field}", text))
    if s.get("type") == "null":
        errors.append(forbidden(f"{path}.type", "type cannot be set to null"))
    if isinstance(s.get("items"), list):
        errors.append(forbidden(f"{path}.items", "items must be a schema object and not an array"))
    extra = s.get("additionalProperties")
    if extra is not None and s.get("properties") and (extra is False or isinstance(extra, dict)):
        errors.append(
            forbidden(
                f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
            )
        )
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        problem = pattern_error(pattern)
        if problem is not None:
            errors.append(
                invalid(
                    f"{path}.pattern", pattern, f"must be a valid regular expression, but isn't: {problem}"
                )
            )
    for name, sub in (s.get("properties") or {}).items():
        if isinstance(sub, dict):
            _openapi_restrictions(sub, _key(path, name), errors)
    if isinstance(s.get("items"), dict):
        _openapi_restrictions(s["items"], f"{path}.items", errors)
    if isinstance(extra, dict):
        _openapi_restrictions(extra, f"{path}.additionalProperties", errors)
    for junctor in _JUNCTORS:
        for i, sub in enumerate(s.get(junctor) or []):
            if isinstance(sub, dict):
                _openapi_restrictions(sub, f"{path}.{junctor}[{i}]", errors)
    if isinstance(s.get("not"), dict):
        _openapi_restrictions(s["not"], f"{path}.not", errors)


def _invariants(s: Obj, level: str, path: str, errors: list[FieldError]) -> None:
    kind = s.get("type", "")
    if kind == "array" and s.get("items") is None:
        errors.append(required(f"{path}.items", "must be specified"))
    if isinstance(s.get("items"), dict):
        _invariants(s["items"], ITEM, f"{path}.items", errors)
    for name, sub in (s.get("properties") or {}).items():
        if isinstance(sub, dict):
            _invariants(sub, FIELD, _key(path, name), errors)
    extra = s.get("additionalProperties")
    if extra is not None and extra is not False:
        if level == ROOT:
            errors.append(forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(extra, dict):
            _invariants(extra, FIELD, f"{path}.additionalProperties", errors)
    if s.get(INT_OR_STRING) and s.get(PRESERVE):
        errors.append(
            invalid(f"{path}.{PRESERVE}", True, "must be false if x-kubernetes-int-or-string is true")
        )
    if s.get(INT_OR_STRING) and s.get(EMBEDDED):
        errors.append(
            invalid(f"{path}.{EMBEDDED}", True, "must be false if x-kubernetes-int-or-string is true")
        )
    _value_validation(s, level, path, errors)
    if s.get(EMBEDDED) and kind != "object":
        if not kind:
            errors.append(
                required(f"{path}.type", "must be object if x-kubernetes-embedded-resource is true")
            )
        else:
            errors.append(
                invalid(f"{path}.type", kind, "must be object if x-kubernetes-embedded-resource is true")
            )
    elif not kind and not s.get(INT_OR_STRING) and not s.get(PRESERVE):
        errors.append(required(f"{path}.type", _EMPTY_TYPE[level]))
    if s.get(EMBEDDED) and extra is not None:
        errors.append(
            forbidden(
                f"{path}.additionalProperties", "must not be used if x-kubernetes-embedded-resource is set"
            )
        )
    if level == ROOT and kind and kind != "object":
        errors.append(invalid(f"{path}.type", kind, "must be object at the root"))
    props = s.get("properties") or {}
    type_meta = level == ROOT or s.get(EMBEDDED)
    for name in ("kind", "apiVersion"):
        sub = props.get(name)
        if type_meta and isinstance(sub, dict) and sub.get("type") != "string":
            errors.append(invalid(f"{_key(path, name)}.type", sub.get("type", ""), "must be string"))
    meta = props.get("metadata")
    if isinstance(meta, dict):
        _metadata(meta, bool(type_meta), level, _key(path, "metadata"), errors)
    if s.get(EMBEDDED) and not s.get(PRESERVE) and not props:
        errors.append(
            required(
                f"{path}.properties",
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            )
        )


def _metadata(s: Obj, type_meta: bool, level: str, path: str, errors: list[FieldError]) -> None:
    if type_meta and s.get("type") != "object":
        errors.append(invalid(f"{path}.type", s.get("type", ""), "must be object"))
    if level != ROOT:
        return
    rest = {k: v for k, v in s.items() if k not in ("type", "default")}
    props = rest.pop("properties", None) or {}
    if set(props) - {"name", "generateName"} or rest:
        errors.append(
            forbidden(
                path,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            )
        )


def _is_int_or_string_pattern(s: Obj) -> tuple[bool, bool]:
    any_of = s.get("anyOf")
    all_of = s.get("allOf") or []
    skip_any = isinstance(any_of, list) and any_of == _INT_OR_STRING_ANY_OF
    skip_first_all = (
        bool(all_of) and isinstance(all_of[0], dict) and all_of[0].get("anyOf") == _INT_OR_STRING_ANY_OF
    )
    return skip_any, skip_first_all


def _value_validation(s: Obj, level: str, path: str, errors: list[FieldError]) -> None:
    skip_any, skip_first_all = _is_int_or_string_pattern(s)
    for junctor in _JUNCTORS:
        if junctor == "anyOf" and skip_any:
            continue  # the int-or-string pattern itself
        for i, sub in enumerate(s.get(junctor) or []):
            if not isinstance(sub, dict):
                continue
            skip = junctor == "allOf" and i == 0 and skip_first_all
            _nested(sub, skip, level, f"{path}.{junctor}[{i}]", errors)
    if isinstance(s.get("not"), dict):
        _nested(s["not"], False, level, f"{path}.not", errors)


def _nested(v: Obj, skip_any_of: bool, level: str, path: str, errors: list[FieldError]) -> None:
    if skip_any_of:
        v = {k: val for k, val in v.items() if k != "anyOf"}
    _value_validation(v, level, path, errors)
    if isinstance(v.get("items"), dict):
        _nested(v["items"], False, level, f"{path}.items", errors)
    for name, sub in (v.get("properties") or {}).items():
        if isinstance(sub, dict):
            _nested(sub, False, FIELD, _key(path, name), errors)
    if v.get("additionalProperties") is not None:
        errors.append(forbidden(f"{path}.additionalProperties", "must be undefined to be structural"))
    for field, text in _NESTED_FORBIDDEN:
        if v.get(field) not in (None, False, "", [], {}):
            errors.append(forbidden(f"{path}.{field}", text))
    if "metadata" in (v.get("properties") or {}):
        errors.append(forbidden(_key(path, "metadata"), "must not be specified in a nested context"))


__all__ = ["check"]
