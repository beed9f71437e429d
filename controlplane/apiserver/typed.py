"""Typed decoding: every request body is walked against its kind's schema, as upstream decodes JSON into
typed Go structs, before anything reads it.

The schema is a type table (`fields.json`, generated from the Python client's models plus the facts
they leave out: quantities, int-or-string, int widths, micro-precision times), walked by one generic
function; no kind has decoding code of its own, and the same walker can take a CRD's schema later.

What the walk does, in upstream's words:
- a value of the wrong JSON type is a hard error with encoding/json's text (`json: cannot unmarshal
  object into Go struct field ConfigMap.data of type string`), which the caller turns into a 400
  (`ConfigMap in version "v1" cannot be handled as a ConfigMap: ...`);
- quantities must parse (resource.Quantity's errors) and are stored in canonical form (`0.5` ->
  `500m`), times must be RFC 3339 and are stored in UTC as metav1.Time / MicroTime print them, byte
  fields must be base64;
- unknown fields are reported (fieldValidation=Strict) or dropped (Warn, Ignore), never stored;
- null means "not set": a null field is dropped (times keep it, as Go prints them), a null list or map
  item becomes the item type's zero value.
`fill_required` puts in the zero values of fields Go always serializes (scalars without omitempty,
struct fields that are no pointers).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from controlplane.apiserver.valuestructs import VALUE_STRUCTS, ZERO_SCALARS
from kubeclient.quantity import QuantityError, canonical

FIELDS_FILE = resources.files("controlplane.apiserver") / "fields.json"

# scalar type names in fields.json
STRING, INT32, INT64, FLOAT, BOOL = "string", "int32", "int64", "float64", "bool"
TIME, MICROTIME, QUANTITY, INT_OR_STRING, BYTES, ANY = (
    "time",
    "microtime",
    "quantity",
    "int-or-string",
    "bytes",
    "any",
)
SCALARS = (STRING, INT32, INT64, FLOAT, BOOL, TIME, MICROTIME, QUANTITY, INT_OR_STRING, BYTES, ANY)
STRUCT, LIST, MAP = "struct", "list", "map"

_GO_SCALAR = {
    STRING: "string",
    INT32: "int32",
    INT64: "int64",
    FLOAT: "float64",
    BOOL: "bool",
    BYTES: "[]uint8",
    TIME: "v1.Time",
    MICROTIME: "v1.MicroTime",
    QUANTITY: "resource.Quantity",
    INT_OR_STRING: "intstr.IntOrString",
    ANY: "interface {}",
}
_ZERO: dict[str, Any] = {
    STRING: "",
    INT32: 0,
    INT64: 0,
    FLOAT: 0,
    BOOL: False,
    QUANTITY: "0",
    INT_OR_STRING: 0,
    BYTES: "",
}
_INT_RANGE = {INT32: (-(2**31), 2**31 - 1), INT64: (-(2**63), 2**63 - 1)}
_TYPE_NAME = re.compile(r"^(?:[A-Z][a-z]+)*?(V\d+(?:alpha\d+|beta\d+)?)([A-Z]\w*)$")


class DecodeError(ValueError):
    """The body cannot be decoded into its type; the message is what upstream's decoder says."""


@dataclass(eq=False)
class Type:
    code: str
    go: str = ""  # the Go type as encoding/json names it in errors
    struct: str = ""  # for structs: the Go struct name (errors say "Go struct field <struct>.<path>")
    inner: Type | None = None
    fields: dict[str, Type] = field(default_factory=dict)
    zeros: dict[str, Any] = field(default_factory=dict)  # required scalar fields and their zero values
    structs: tuple[str, ...] = ()  # struct fields Go always writes (valuestructs.py)


def _go_struct(name: str) -> tuple[str, str]:
    """("v1.PodSpec", "PodSpec") for the Python client's "V1PodSpec" (also "CoreV1Event", "EventsV1Event")."""
    m = _TYPE_NAME.match(name)
    if not m:
        return name, name
    return f"{m.group(1).lower()}.{m.group(2)}", m.group(2)


@dataclass
class Table:
    types: dict[str, Type]

    def root(self, name: str) -> Type | None:
        t = self.types.get(name)
        return t if t is not None and t.code == STRUCT else None


def build_table(data: dict[str, Any]) -> Table:
    raw: dict[str, dict[str, str]] = data["types"]
    required: dict[str, list[str]] = data.get("required", {})
    types: dict[str, Type] = {}

    def resolve(ref: str) -> Type:
        if ref in types:
            return types[ref]
        if ref.startswith("[]"):
            t = types[ref] = Type(LIST)
            t.inner = resolve(ref[2:])
            t.go = "[]" + t.inner.go
            return t
        if ref.startswith("map[") and ref.endswith("]"):
            t = types[ref] = Type(MAP)
            t.inner = resolve(ref[4:-1])
            t.go = "map[string]" + t.inner.go
            return t
        if ref in SCALARS:
            t = types[ref] = Type(ref, _GO_SCALAR[ref])
            return t
        fields_ = raw.get(ref)
        if fields_ is None:
            t = types[ref] = Type(ANY, _GO_SCALAR[ANY])
            return t
        go, struct = _go_struct(ref)
        t = types[ref] = Type(STRUCT, go, struct)
        for name, sub in fields_.items():
            t.fields[name] = resolve(sub)
        for name in required.get(ref, ()):
            sub_t = t.fields.get(name)
            if sub_t is not None and sub_t.code in _ZERO and sub_t.code not in (QUANTITY, INT_OR_STRING):
                t.zeros[name] = _ZERO[sub_t.code]
        t.zeros.update(ZERO_SCALARS.get(ref, {}))
        t.structs = tuple(
            name for name in VALUE_STRUCTS.get(ref, ()) if name in t.fields and t.fields[name].code == STRUCT
        )
        return t

    for name in raw:
        resolve(name)
    return Table(types)


@cache
def table() -> Table:
    return build_table(json.loads(FIELDS_FILE.read_text()))


# --- errors ------------------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    """encoding/json's name for a JSON value in UnmarshalTypeError ("object", "number 1.5", ...)."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    return "number"


def _number_literal(value: Any) -> str:
    return "number " + (json.dumps(value) if isinstance(value, float) else str(value))


def _type_error(what: str, struct: str, stack: tuple[str, ...], go: str) -> DecodeError:
    if struct or stack:
        return DecodeError(
            f"json: cannot unmarshal {what} into Go struct field {struct}.{'.'.join(stack)} of type {go}"
        )
    return DecodeError(f"json: cannot unmarshal {what} into Go value of type {go}")


# --- scalars -----------------------------------------------------------------------------------------

_LAYOUT = "2006-01-02T15:04:05Z07:00"
_LAYOUT_MICRO = "2006-01-02T15:04:05.000000Z07:00"
_CANONICAL_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_CANONICAL_MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
_DIGITS = re.compile(r"[0-9]+")
_ZONE = re.compile(r"[+-][0-9]{2}:[0-9]{2}")
# RFC 3339 as Go's time.Parse walks it: (layout element, digits it takes; 0 for a literal)
_ELEMENTS = (
    ("2006", 4),
    ("-", 0),
    ("01", 2),
    ("-", 0),
    ("02", 2),
    ("T", 0),
    ("15", 2),
    (":", 0),
    ("04", 2),
    (":", 0),
    ("05", 2),
)
_RANGES = (
    (1, "month", 1, 12),
    (2, "day", 1, 31),
    (3, "hour", 0, 23),
    (4, "minute", 0, 59),
    (5, "second", 0, 59),
)


def _time(value: str, micro: bool) -> str:
    """metav1.Time / MicroTime: parse RFC 3339 (with time.Parse's errors), print in UTC to the second
    (Time) or the microsecond (MicroTime), as upstream stores them."""
    if (_CANONICAL_MICRO if micro else _CANONICAL_TIME).match(value):
        try:
            dt.datetime.fromisoformat(value[:19])  # the ranges (day of month, hour, ...) hold
            return value
        except ValueError:
            pass
    layout = _LAYOUT_MICRO if micro else _LAYOUT
    rest = value

    def cannot(elem: str) -> DecodeError:
        return DecodeError(
            f"parsing time {json.dumps(value)} as {json.dumps(layout)}: cannot parse {json.dumps(rest)} as {json.dumps(elem)}"
        )

    numbers: list[int] = []
    for elem, width in _ELEMENTS:
        if width == 0:
            if not rest.startswith(elem):
                raise cannot(elem)
        elif not _DIGITS.fullmatch(rest[:width]) or len(rest) < width:
            raise cannot(elem)
        else:
            numbers.append(int(rest[:width]))
        rest = rest[width or len(elem) :]
    micros = 0
    if len(rest) >= 2 and rest[0] in ".," and rest[1].isascii() and rest[1].isdigit():
        digits = _DIGITS.match(rest, 1)
        assert digits is not None
        micros = int((digits.group() + "000000")[:6])
        rest = rest[digits.end() :]
    offset = dt.timedelta()
    if rest.startswith("Z"):
        rest = rest[1:]
    elif _ZONE.match(rest):
        sign = 1 if rest[0] == "+" else -1
        offset = sign * dt.timedelta(hours=int(rest[1:3]), minutes=int(rest[4:6]))
        rest = rest[6:]
    else:
        raise cannot("Z07:00")
    if rest:
        raise DecodeError(f"parsing time {json.dumps(value)}: extra text: {json.dumps(rest)}")
    for index, unit, low, high in _RANGES:
        if not low <= numbers[index] <= high:
            raise DecodeError(f"parsing time {json.dumps(value)}: {unit} out of range")
    try:
        when = dt.datetime(*numbers, micros) - offset  # type: ignore[misc]
    except (ValueError, OverflowError):
        raise DecodeError(f"parsing time {json.dumps(value)}: day out of range") from None
    text = (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:{when.minute:02d}:{when.second:02d}"
    )
    return f"{text}.{when.microsecond:06d}Z" if micro else text + "Z"


_BASE64 = re.compile(r"[^A-Za-z0-9+/=]")


def _check_base64(value: str) -> None:
    """[]byte fields carry standard base64 (padding required, newlines ignored), as encoding/json reads them."""
    text = value.replace("\r", "").replace("\n", "")
    bad = _BASE64.search(text)
    if bad is not None:
        raise DecodeError(f"illegal base64 data at input byte {bad.start()}")
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        at = text.find("=")
        raise DecodeError(
            f"illegal base64 data at input byte {at if at >= 0 else len(text) - len(text) % 4}"
        ) from None


# --- the walk ----------------------------------------------------------------------------------------


_WRONG = object()  # a scalar of the wrong JSON type


@lru_cache(maxsize=4096)
def _canonical(value: str | int | float) -> str:
    """Quantities repeat ("500m", "128Mi"): parse each spelling once."""
    return canonical(value)


@dataclass
class _Walk:
    prune: bool
    unknown: list[str] = field(default_factory=list)


def _zero(t: Type) -> Any:
    if t.code == STRUCT:
        return {}
    return _ZERO.get(t.code)


def _scalar(value: Any, t: Type, struct: str, stack: tuple[str, ...], key: str | None = None) -> Any:
    """The value to store for a scalar (canonical where upstream canonicalizes), or _WRONG for a value of
    the wrong JSON type; raises DecodeError for what the type's own parser refuses. `key`: the field the
    value is in (not yet on `stack`, which is built only for an error)."""
    code = t.code
    if key is not None and code not in (STRING, BOOL, FLOAT, BYTES, ANY):
        stack = (*stack, key)
    if code == STRING:
        return value if isinstance(value, str) else _WRONG
    if code == INT32 or code == INT64:
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = _INT_RANGE[code]
            if low <= value <= high:
                return value
            raise _type_error(_number_literal(value), struct, stack, t.go)
        if isinstance(value, float):
            raise _type_error(_number_literal(value), struct, stack, t.go)
        return _WRONG
    if code == BOOL:
        return value if isinstance(value, bool) else _WRONG
    if code == FLOAT:
        return value if isinstance(value, int | float) and not isinstance(value, bool) else _WRONG
    if code == QUANTITY:
        if isinstance(value, bool) or isinstance(value, dict | list):
            value = json.dumps(value)
        try:
            return _canonical(value)
        except QuantityError as err:
            raise DecodeError(str(err)) from None
    if code == INT_OR_STRING:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
            return value
        what = (
            _number_literal(value)
            if isinstance(value, int | float) and not isinstance(value, bool)
            else _describe(value)
        )
        raise _type_error(what, struct, stack, "int32")
    if code == TIME or code == MICROTIME:
        if isinstance(value, str):
            return _time(value, code == MICROTIME)
        raise _type_error(_describe(value), struct, stack, "string")
    if code == BYTES:
        if isinstance(value, str):
            _check_base64(value)
            return value
        return _WRONG
    return value  # ANY


def _store(value: Any, t: Type, struct: str, stack: tuple[str, ...]) -> Any:
    new = _scalar(value, t, struct, stack)
    if new is _WRONG:
        raise _type_error(_describe(value), struct, stack, t.go)
    return new


def _struct(obj: dict[str, Any], t: Type, path: str, stack: tuple[str, ...], walk: _Walk) -> None:
    fields_ = t.fields
    for key in list(obj):
        sub = fields_.get(key)
        if sub is None:
            walk.unknown.append(f"{path}.{key}" if path else key)
            if walk.prune:
                del obj[key]
            continue
        value = obj[key]
        if value is None:
            if sub.code not in (TIME, MICROTIME, ANY):
                del obj[key]
            continue
        code = sub.code
        if code == STRUCT or code == LIST or code == MAP:
            _container(value, sub, f"{path}.{key}" if path else key, (*stack, key), t.struct, walk)
        elif code == STRING and isinstance(value, str):
            continue  # the common case, without building the error context
        else:
            new = _scalar(value, sub, t.struct, stack, key)
            if new is _WRONG:
                raise _type_error(_describe(value), t.struct, (*stack, key), sub.go)
            if new is not value:
                obj[key] = new


def _container(value: Any, t: Type, path: str, stack: tuple[str, ...], struct: str, walk: _Walk) -> None:
    """A struct, list or map value found at `path` (a field of Go struct `struct`)."""
    if t.code == STRUCT:
        if not isinstance(value, dict):
            raise _type_error(_describe(value), struct, stack, t.go)
        _struct(value, t, path, stack, walk)
        return
    inner = t.inner
    assert inner is not None
    if t.code == LIST:
        if not isinstance(value, list):
            raise _type_error(_describe(value), struct, stack, t.go)
        items: Any = enumerate(value)
        where = "{}[{}]"
    else:
        if not isinstance(value, dict):
            raise _type_error(_describe(value), struct, stack, t.go)
        items = list(value.items())
        where = "{}.{}"
    nested = inner.code in (STRUCT, LIST, MAP)
    for index, item in items:
        if item is None:
            value[index] = _zero(inner)
        elif nested:
            _container(item, inner, where.format(path, index), stack, struct, walk)
        else:
            new = _store(item, inner, struct, stack)
            if new is not item:
                value[index] = new


# Decoders of roots fields.json does not hold (custom resources' schemas: apiextensions/resource.py),
# called with (obj, prune) and returning the unknown fields' paths.
CUSTOM: dict[str, Callable[[dict[str, Any], bool], list[str]]] = {}


def decode(obj: dict[str, Any], root: str, prune: bool = True) -> list[str]:
    """Check and canonicalize `obj` (a JSON object) as type `root`, in place. Returns the paths of unknown
    fields (dropped when `prune`); raises DecodeError for values of the wrong type."""
    custom = CUSTOM.get(root)
    if custom is not None:
        return custom(obj, prune)
    t = table().root(root)
    if t is None:
        return []
    walk = _Walk(prune)
    _struct(obj, t, "", (), walk)
    return walk.unknown


# --- zero values of required fields ------------------------------------------------------------------


def _fill(value: Any, t: Type) -> None:
    if t.code in (LIST, MAP):
        inner = t.inner
        if inner is None or inner.code not in (STRUCT, LIST, MAP):
            return
        items = value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
        for item in items:
            _fill(item, inner)
    elif t.code == STRUCT and isinstance(value, dict):
        for name, zero in t.zeros.items():
            if value.get(name) is None:
                value[name] = zero
        for name in t.structs:
            if value.get(name) is None:
                value[name] = {}
        for key, item in value.items():
            sub = t.fields.get(key)
            if sub is not None and sub.code in (STRUCT, LIST, MAP) and isinstance(item, dict | list):
                _fill(item, sub)


def fill_required(obj: Any, root: str) -> None:
    """Zero values for the fields Go always serializes: required scalars (strict clients, the Python
    client's models, refuse objects without them) and struct fields that are no pointers (empty structs,
    as upstream writes them; valuestructs.py)."""
    t = table().root(root)
    if t is not None:
        _fill(obj, t)


def field_type(root: str, path: str) -> Type | None:
    """The type at a dotted path below `root` (lists and maps are stepped through), for OpenAPI and tests."""
    t = table().root(root)
    for part in path.split("."):
        while t is not None and t.code in (LIST, MAP):
            t = t.inner
        t = t.fields.get(part) if t is not None else None
    return t
