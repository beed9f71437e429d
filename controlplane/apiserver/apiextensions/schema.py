"""What a structural schema does to a custom object: defaulting, pruning and validation.

The order is upstream's: a body is pruned of fields the schema does not name (unless
x-kubernetes-preserve-unknown-fields), defaulted (`default`, on write and, for objects read in another
version, on read), then validated (types, required, enum, bounds, lengths, pattern, items, format,
nullable, list types), each failure a FieldError naming the field as upstream's go-openapi validator
does (`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`).

On update, validation ratchets (upstream's CRDValidationRatcheting, on by default since 1.30, GA in 1.33):
a node whose value is unchanged from the old object's value at the same place is not validated, so a
schema tightened after objects were stored does not block writes that leave those fields alone. "The
same place" is the key in an object or map, the keys in a `map` list, the value in a `set` list; items
of atomic lists, and nodes under anyOf/oneOf/not, have no old counterpart (the whole list or value is
still compared).
Schemas are the CRD's JSON (JSONSchemaProps) as stored; nothing is compiled beyond regexes (cached).
"""

from __future__ import annotations

import copy
import datetime as dt
import ipaddress
import re
import uuid
from typing import Any

from controlplane.apiserver import typed
from controlplane.apiserver.apiextensions.patterns import PatternError, compile_pattern
from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required, too_many

Obj = dict[str, Any]
PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
INT_OR_STRING = "x-kubernetes-int-or-string"
# What a root (or an embedded resource) always keeps, whatever its schema says.
_TYPE_META = ("apiVersion", "kind", "metadata")


def json_type(value: Any) -> str:
    """The OpenAPI type name of a JSON value, as go-openapi reports it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def schema_json_type(value: Any) -> str:
    """encoding/json's name for a JSON value's type, as its unmarshal errors print it."""
    return {"integer": "number", "boolean": "bool"}.get(json_type(value), json_type(value))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- pruning ------------------------------------------------------------------------------------------


def prune(obj: Obj, schema: Obj) -> list[str]:
    """Drop, in place, every field the schema does not specify; returns their paths (for
    fieldValidation Warn/Strict). The root's and embedded resources' metadata keep ObjectMeta's fields."""
    unknown: list[str] = []
    _prune_object(obj, schema, "", True, unknown)
    return unknown


def _prune_metadata(meta: Any, path: str, unknown: list[str]) -> None:
    """ObjectMeta's fields only, decoded as every object's metadata is (a wrong type is a DecodeError:
    the 400 upstream's decoder answers)."""
    if isinstance(meta, dict):
        unknown += [_child(path, u) for u in typed.decode(meta, "V1ObjectMeta", prune=True)]
    elif meta is not None:
        raise typed.DecodeError(
            f"json: cannot unmarshal {schema_json_type(meta)} into Go struct field {path} of type v1.ObjectMeta"
        )


def _prune_object(value: Obj, schema: Obj, path: str, resource: bool, unknown: list[str]) -> None:
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    preserve = bool(schema.get(PRESERVE))
    for key in list(value):
        sub = props.get(key)
        here = _child(path, key)
        if resource and key in _TYPE_META:
            if key == "metadata":
                _prune_metadata(value[key], here, unknown)
            continue
        if sub is not None:
            _prune_value(value[key], sub, here, unknown)
        elif isinstance(extra, dict):
            _prune_value(value[key], extra, here, unknown)
        elif extra is True or preserve:
            continue
        else:
            unknown.append(here)
            del value[key]


def _prune_value(value: Any, schema: Obj, path: str, unknown: list[str]) -> None:
    if isinstance(value, dict):
        if schema.get("type") == "object" or "properties" in schema or "additionalProperties" in schema:
            _prune_object(value, schema, path, bool(schema.get(EMBEDDED)), unknown)
        elif schema.get(EMBEDDED):
            _prune_object(value, schema, path, True, unknown)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _prune_value(item, schema["items"], f"{path}[{i}]", unknown)


# --- defaulting ---------------------------------------------------------------------------------------


def apply_defaults(value: Any, schema: Obj) -> None:
    """Set `default`s of missing properties, in place, from the top down (upstream's structural defaulting)."""
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        for key, item in value.items():
            sub = (schema.get("properties") or {}).get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                apply_defaults(item, sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def has_defaults(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if "default" in schema:
        return True
    subs = [
        *(schema.get("properties") or {}).values(),
        schema.get("items"),
        schema.get("additionalProperties"),
    ]
    return any(has_defaults(s) for s in subs)


# --- validation ---------------------------------------------------------------------------------------


def _type_error(path: str, value: Any, wanted: str) -> FieldError:
    """field.TypeInvalid: shown as an invalid value, but of its own type (it keeps CEL rules from running)."""
    actual = json_type(value)
    shown = invalid(path, actual, f'{path} in body must be of type {wanted}: "{actual}"')
    return FieldError("FieldValueTypeInvalid", shown.field, shown.detail)


def _type_ok(value: Any, wanted: str) -> bool:
    actual = json_type(value)
    if wanted == "number":
        return actual in ("integer", "number")
    return actual == wanted


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def _is_datetime(text: str) -> bool:
    return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text))


def _is_ip(text: str, family: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == family
    except ValueError:
        return False


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return bool(re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", text))


_FORMATS = {
    "date": _is_date,
    "date-time": _is_datetime,
    "ipv4": lambda t: _is_ip(t, 4),
    "ipv6": lambda t: _is_ip(t, 6),
    "uuid": _is_uuid,
    "byte": lambda t: bool(re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", t)) and len(t) % 4 == 0,
    "hostname": lambda t: bool(
        re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", t)
    ),
}


class _Missing:
    """No old value at this place (create, a new key, an uncorrelated list item)."""


MISSING: Any = _Missing()


def same_json(a: Any, b: Any) -> bool:
    """Go's DeepEqual over decoded JSON: 1 and 1.0, or 1 and true, are different values."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def validate(value: Any, schema: Obj, path: str = "", old: Any = MISSING) -> list[FieldError]:
    """Every violation of `schema` by `value` (the whole object at the root); with `old`, the object
    before an update, ratcheted (see the module's docstring)."""
    errors: list[FieldError] = []
    _validate(value, schema, path, errors, root=True, old=old)
    return errors


def _validate(
    value: Any, schema: Obj, path: str, errors: list[FieldError], root: bool = False, old: Any = MISSING
) -> None:
    if old is not MISSING and same_json(value, old):
        return  # ratcheted: unchanged
    if value is None:
        if not schema.get("nullable") and schema.get("type") and not schema.get(PRESERVE):
            errors.append(invalid(path, "null", f'{path} in body must be of type {schema["type"]}: "null"'))
        return
    wanted = schema.get("type", "")
    if schema.get(INT_OR_STRING):
        if json_type(value) not in ("integer", "string"):
            errors.append(_type_error(path, value, "integer,string"))
            return
    elif wanted and not _type_ok(value, wanted):
        errors.append(_type_error(path, value, wanted))
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(not_supported(path, value, list(schema["enum"])))
    _junctors(value, schema, path, errors, old)
    if isinstance(value, str):
        _validate_string(value, schema, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(value, schema, path, errors)
    elif isinstance(value, list):
        _validate_array(value, schema, path, errors, old)
    elif isinstance(value, dict):
        _validate_object(value, schema, path, errors, root, old)


def _passes(value: Any, schema: Any, path: str) -> bool:
    return isinstance(schema, dict) and not validate(value, schema, path)


def _junctors(value: Any, schema: Obj, path: str, errors: list[FieldError], old: Any = MISSING) -> None:
    """allOf, anyOf, oneOf and not: value validations only (a structural schema's junctors carry no types).
    allOf ratchets like the node itself; what is under anyOf, oneOf and not does not."""
    for sub in schema.get("allOf") or []:
        if isinstance(sub, dict):
            _validate(value, sub, path, errors, old=old)
    any_of = schema.get("anyOf") or []
    if any_of and not schema.get(INT_OR_STRING) and not any(_passes(value, s, path) for s in any_of):
        errors.append(invalid(path, value, f"{path} in body must validate at least one schema (anyOf)"))
    one_of = schema.get("oneOf") or []
    if one_of and sum(1 for s in one_of if _passes(value, s, path)) != 1:
        errors.append(invalid(path, value, f"{path} in body must validate one and only one schema (oneOf)"))
    if isinstance(schema.get("not"), dict) and _passes(value, schema["not"], path):
        errors.append(invalid(path, value, f"{path} in body must not validate the schema (not)"))


def _validate_string(value: str, schema: Obj, path: str, errors: list[FieldError]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        limit = schema["maxLength"]
        errors.append(
            FieldError(
                "FieldValueTooLong",
                path,
                f"Too long: may not be more than {limit} byte{'s' if limit != 1 else ''}",
            )
        )
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(
            invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
        )
    pattern = schema.get("pattern")
    if pattern:
        try:
            matched = compile_pattern(pattern).search(value) is not None
        except PatternError as err:  # a CRD stored before patterns were checked: go-openapi's text
            errors.append(
                invalid(
                    path, value, f"{path} in body should match '{pattern}, but pattern is invalid: {err}'"
                )
            )
        else:
            if not matched:
                errors.append(invalid(path, value, f"{path} in body should match '{pattern}'"))
    check = _FORMATS.get(schema.get("format", ""))
    if check is not None and not check(value):
        errors.append(invalid(path, value, f'{path} in body must be of type {schema["format"]}: "{value}"'))


def _number_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _validate_number(value: float, schema: Obj, path: str, errors: list[FieldError]) -> None:
    if "maximum" in schema:
        top = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= top:
            errors.append(invalid(path, value, f"{path} in body should be less than {_number_text(top)}"))
        elif value > top:
            errors.append(
                invalid(path, value, f"{path} in body should be less than or equal to {_number_text(top)}")
            )
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            errors.append(invalid(path, value, f"{path} in body should be greater than {_number_text(low)}"))
        elif value < low:
            errors.append(
                invalid(path, value, f"{path} in body should be greater than or equal to {_number_text(low)}")
            )
    step = schema.get("multipleOf")
    if step and (value / step) != int(value / step):
        errors.append(invalid(path, value, f"{path} in body should be a multiple of {_number_text(step)}"))


def _old_item(item: Any, old: Any, schema: Obj) -> Any:
    """The old list's counterpart of `item`: by its keys in a map list, by value in a set; none in an
    atomic list."""
    if not isinstance(old, list):
        return MISSING
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        return next((o for o in old if same_json(o, item)), MISSING)
    if list_type == "map" and isinstance(item, dict):
        keys = schema.get("x-kubernetes-list-map-keys") or []
        wanted = {k: item.get(k) for k in keys}
        return next(
            (o for o in old if isinstance(o, dict) and same_json({k: o.get(k) for k in keys}, wanted)),
            MISSING,
        )
    return MISSING


def _validate_array(
    value: list[Any], schema: Obj, path: str, errors: list[FieldError], old: Any = MISSING
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(too_many(path, len(value), schema["maxItems"]))
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(
            invalid(path, len(value), f"{path} in body should have at least {schema['minItems']} items")
        )
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(item, items, f"{path}[{i}]", errors, old=_old_item(item, old, schema))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                errors.append(duplicate(f"{path}[{i}]", item))
            seen.append(item)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: list[Any] = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = {k: item.get(k) for k in keys}
            if key in seen_keys:
                errors.append(duplicate(f"{path}[{i}]", key))
            seen_keys.append(key)


def _validate_object(
    value: Obj, schema: Obj, path: str, errors: list[FieldError], root: bool, old: Any = MISSING
) -> None:
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(required(_child(path, name)))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(too_many(path, len(value), schema["maxProperties"]))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(
            invalid(
                path, len(value), f"{path} in body should have at least {schema['minProperties']} properties"
            )
        )
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    embedded = root or schema.get(EMBEDDED)
    for key, item in value.items():
        if embedded and key == "metadata":
            continue  # ObjectMeta, checked as every object's metadata
        sub = props.get(key)
        if sub is None and isinstance(extra, dict):
            sub = extra
        if sub is not None:
            old_item = old.get(key, MISSING) if isinstance(old, dict) else MISSING
            _validate(item, sub, _child(path, key), errors, old=old_item)
    if schema.get(EMBEDDED):
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                errors.append(required(_child(path, key), "must not be empty"))


__all__ = ["MISSING", "apply_defaults", "has_defaults", "json_type", "prune", "same_json", "validate"]
