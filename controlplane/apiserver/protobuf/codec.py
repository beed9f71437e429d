"""Kubernetes objects between their JSON form (plain dicts) and upstream's protobuf messages.

The message table (`tables.py`) gives each message's fields: number, JSON name, type and label. The
JSON side follows upstream's Go types: maps are repeated {key=1, value=2} entries sorted by key; a
metav1.Time is {seconds=1, nanos=2} printed as RFC 3339 to the second (MicroTime to the microsecond;
a zero time, which Go writes for an unset non-pointer time, is left out); a Quantity is {string=1} and prints as that string; an IntOrString is
{type=1, intVal=2, strVal=3} and prints as the int or the string; a RawExtension / FieldsV1 is
{raw=1} holding JSON text; int64 prints as a JSON number, bytes as base64; an embedded struct is a
message on the wire and inline in JSON; a named slice (UserInfo's extra values) is a wrapper message.
A CRD schema's (`extensiontables`) double is a fixed 64-bit float printed as Go prints it; its JSON
values are {raw=1} messages (null: an empty one); its OrArray / OrBool / OrStringArray unions print as
the list, the schema or the bool upstream's MarshalJSON picks.

Decoding drops what upstream's JSON drops: unknown field numbers, empty strings and bytes (Go writes
every non-pointer field, so "" means unset), and the zeros of the non-pointer `omitempty` numbers and
bools Go clients always write (OMIT_ZERO: a port's hostPort, a probe's periods, metadata.generation).
Other zeros are kept: a pointer field (replicas, automountServiceAccountToken, gracePeriodSeconds, an
EndpointSlice's `ready`) carries them as values, and the JSON decoder after this step fills and checks
the rest like any other body.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
import struct
from collections.abc import Callable
from typing import Any

from controlplane.apiserver.protobuf import extensiontables, tables, wire
from controlplane.apiserver.protobuf.wire import varint

Obj = dict[str, Any]
# Deeper messages than this are refused (upstream's protobuf decoder stops at 100 levels too).
MAX_DEPTH = 100


class CodecError(ValueError):
    """A message that cannot be decoded or an object that cannot be encoded; the text is upstream's."""


# --- the message table --------------------------------------------------------------------------------

Field = tuple[int, str, str, str]
MESSAGES: dict[str, tuple[Field, ...]] = dict(tables.MESSAGES)
ROOTS: dict[tuple[str, str], str] = dict(tables.ROOTS)
# CustomResourceDefinition and APIService: not in the fixtures, written from upstream's generated.proto.
MESSAGES.update(extensiontables.MESSAGES)
ROOTS.update(extensiontables.ROOTS)

# apimachinery's meta.k8s.io/v1 messages that are not in the fixtures as kinds of their own.
MESSAGES["PartialObjectMetadata"] = ((1, "metadata", "ObjectMeta", ""),)
MESSAGES["PartialObjectMetadataList"] = (
    (1, "metadata", "ListMeta", ""),
    (2, "items", "PartialObjectMetadata", "repeated"),
)
ROOTS[("meta.k8s.io/v1", "PartialObjectMetadata")] = "PartialObjectMetadata"
ROOTS[("meta.k8s.io/v1", "PartialObjectMetadataList")] = "PartialObjectMetadataList"
ROOTS[("meta.k8s.io/v1", "Status")] = "Status"
ROOTS[("meta.k8s.io/v1", "WatchEvent")] = "WatchEvent"
for (_api_version, _kind), _message in list(ROOTS.items()):
    if not _kind.endswith("List") and (_api_version, _kind + "List") not in ROOTS:
        _list = _message + "List"
        MESSAGES.setdefault(_list, ((1, "metadata", "ListMeta", ""), (2, "items", _message, "repeated")))
        ROOTS[(_api_version, _kind + "List")] = _list

# List kinds print `items` even when empty (Go's json tag has no omitempty).
_LISTS = frozenset(
    m for (_, kind), m in ROOTS.items() if kind.endswith("List") and "items" in {f[1] for f in MESSAGES[m]}
)
# Non-pointer `omitempty` integers and bools of the types Go clients write most (upstream's types.go):
# a message holding all the marker fields leaves these out of JSON when they are zero.
_OMIT_ZERO_RULES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("generateName", "generation"), ("generation",)),
    (("containerPort", "hostPort"), ("hostPort",)),
    (("stdinOnce", "tty"), ("stdin", "stdinOnce", "tty")),
    (
        ("initialDelaySeconds", "periodSeconds"),
        ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"),
    ),
    (("hostIPC", "hostPID"), ("hostNetwork", "hostPID", "hostIPC")),
    (("mountPath", "readOnly"), ("readOnly",)),
    (("targetPort", "nodePort"), ("nodePort",)),
    (("healthCheckNodePort",), ("healthCheckNodePort", "publishNotReadyAddresses")),
    (("progressDeadlineSeconds", "paused"), ("minReadySeconds", "paused")),
    (("minReadySeconds", "template", "selector"), ("minReadySeconds",)),
    (
        ("unavailableReplicas",),
        (
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "unavailableReplicas",
        ),
    ),
    (
        ("fullyLabeledReplicas",),
        ("fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration"),
    ),
    (
        ("currentRevision", "updateRevision", "currentReplicas"),
        ("observedGeneration", "readyReplicas", "currentReplicas", "updatedReplicas", "availableReplicas"),
    ),
    (
        ("numberMisscheduled",),
        ("observedGeneration", "updatedNumberScheduled", "numberAvailable", "numberUnavailable"),
    ),
    (("unschedulable", "taints"), ("unschedulable",)),
    (("involvedObject", "count"), ("count",)),
    (("uncountedTerminatedPods",), ("active", "succeeded", "failed")),
    (("retryAfterSeconds",), ("retryAfterSeconds",)),
    (("details", "code"), ("code",)),
    (("sizeBytes", "names"), ("sizeBytes",)),
    (("exitCode", "signal"), ("signal",)),
    (("disruptionsAllowed",), ("observedGeneration",)),
)
OMIT_ZERO: dict[str, frozenset[str]] = {}
for _name, _fields in MESSAGES.items():
    _names = {f[1] for f in _fields}
    _omit = {o for markers, omitted in _OMIT_ZERO_RULES if set(markers) <= _names for o in omitted}
    if _omit:
        OMIT_ZERO[_name] = frozenset(_omit & _names)
OMIT_ZERO.update(extensiontables.OMIT_ZERO)
_BY_NUMBER: dict[str, dict[int, Field]] = {
    name: {f[0]: f for f in fields} for name, fields in MESSAGES.items()
}
_VARINT_TYPES = frozenset(("bool", "int"))


def _wire_type(t: str, label: str) -> int:
    if label == "map":
        return wire.BYTES
    if t in _VARINT_TYPES:
        return wire.VARINT
    return wire.FIXED64 if t == "double" else wire.BYTES


# Each field with its tag bytes (number and wire type) computed once.
_ENCODE: dict[str, tuple[tuple[int, str, str, str, bytes], ...]] = {
    name: tuple((n, j, t, label, wire.key(n, _wire_type(t, label))) for n, j, t, label in fields)
    for name, fields in MESSAGES.items()
}


# Kinds every group version registers (metav1.AddToGroupVersion): a client deleting a Deployment sends
# its DeleteOptions as apps/v1.
_EVERY_VERSION = {
    kind: ROOTS[("v1", kind)]
    for kind in (
        "DeleteOptions",
        "CreateOptions",
        "UpdateOptions",
        "PatchOptions",
        "GetOptions",
        "ListOptions",
        "WatchEvent",
    )
}


def message_for(api_version: str, kind: str) -> str | None:
    """The message of a kind at a version, None when the table has no such kind."""
    return ROOTS.get((api_version, kind)) or (_EVERY_VERSION.get(kind) if api_version else None)


# --- decoding: protobuf -> JSON -----------------------------------------------------------------------


def _time(data: bytes, micro: bool) -> str | None:
    seconds = nanos = 0
    for number, w, value in wire.fields(data):
        if w == wire.VARINT:
            if number == 1:
                seconds = wire.signed(value)  # type: ignore[arg-type]
            elif number == 2:
                nanos = wire.signed(value)  # type: ignore[arg-type]
    if seconds == 0 and nanos == 0:
        return None
    try:
        when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(
            seconds=seconds, microseconds=nanos // 1000
        )
    except OverflowError:
        raise CodecError("proto: time out of range") from None
    if micro:
        return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond:06d}Z"
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _string_field(data: bytes, number: int) -> str:
    for n, w, value in wire.fields(data):
        if n == number and w == wire.BYTES:
            return value.decode(errors="replace")  # type: ignore[union-attr]
    return ""


def _int_or_string(data: bytes) -> int | str:
    kind = int_val = 0
    str_val = ""
    for n, w, value in wire.fields(data):
        if n == 1 and w == wire.VARINT:
            kind = wire.signed(value)  # type: ignore[arg-type]
        elif n == 2 and w == wire.VARINT:
            int_val = wire.signed(value)  # type: ignore[arg-type]
        elif n == 3 and w == wire.BYTES:
            str_val = value.decode(errors="replace")  # type: ignore[union-attr]
    return str_val if kind == 1 else int_val


def _raw_json(data: bytes, depth: int) -> Any:
    raw = b""
    for n, w, value in wire.fields(data):
        if n == 1 and w == wire.BYTES:
            raw = value  # type: ignore[assignment]
    if not raw:
        return None
    if raw.startswith(MAGIC):  # an embedded object in protobuf (a RawExtension a Go client encoded so)
        return decode_envelope(raw, depth + 1)[0]
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise CodecError("proto: RawExtension holds neither JSON nor a protobuf object") from None


_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
_UNIT_NANOS = {"ns": 1, "us": 1000, "µs": 1000, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def _duration_text(nanos: int) -> str:
    """Go's time.Duration.String()."""
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 1000), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(nanos / size) + unit
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _trim(rest / 10**9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return sign + seconds


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")


def _scalar(t: str, w: int, value: int | bytes, depth: int) -> Any:
    """The JSON value of one field's wire value (None: leave the field out)."""
    if t in _VARINT_TYPES:
        if w != wire.VARINT:
            raise CodecError(f"proto: wrong wireType = {w} for field of type {t}")
        return bool(value) if t == "bool" else wire.signed(value)  # type: ignore[arg-type]
    if t == "double":
        if w != wire.FIXED64:
            raise CodecError(f"proto: wrong wireType = {w} for field of type {t}")
        (number,) = struct.unpack("<d", value)
        if not math.isfinite(number):  # JSON has no NaN or infinity: upstream cannot store it either
            raise CodecError(f"json: unsupported value: {number}")
        # Go's JSON prints an integral float64 as an integer below 1e21 (10.0 as 10), larger ones as 1e+21.
        return int(number) if number.is_integer() and abs(number) < 1e21 else number
    if w != wire.BYTES:
        raise CodecError(f"proto: wrong wireType = {w} for field of type {t}")
    data: bytes = value  # type: ignore[assignment]
    if t == "string":
        return data.decode(errors="replace")
    if t == "bytes":
        return base64.b64encode(data).decode()
    if t == "time" or t == "microtime":
        return _time(data, t == "microtime")
    if t == "quantity":
        return _string_field(data, 1)
    if t == "intorstring":
        return _int_or_string(data)
    if t == "rawextension" or t == "fieldsv1" or t == "json":
        return _raw_json(data, depth)
    if t in _SCHEMA_UNIONS:
        return _decode_union(t, data, depth)
    if t == "duration":
        nanos = 0
        for n, fw, v in wire.fields(data):
            if n == 1 and fw == wire.VARINT:
                nanos = wire.signed(v)  # type: ignore[arg-type]
        return _duration_text(nanos)
    return decode_message(data, t, depth + 1)


# JSONSchemaProps' unions: (the message's field numbers of the schema and of the list, the list's item type).
_SCHEMA_UNIONS = {
    "schemaorarray": (1, 2, extensiontables.SCHEMA),
    "schemaorstrings": (1, 2, "string"),
    "schemaorbool": (2, 0, ""),
}


def _decode_union(t: str, data: bytes, depth: int) -> Any:
    """A schema union as upstream's MarshalJSON prints it: the list when it has items, else the schema,
    else (OrBool) the bool."""
    schema_number, list_number, item_type = _SCHEMA_UNIONS[t]
    schema: Any = None
    items: list[Any] = []
    allows = False
    for n, w, value in wire.fields(data):
        if n == schema_number and w == wire.BYTES:
            schema = decode_message(value, extensiontables.SCHEMA, depth + 1)  # type: ignore[arg-type]
        elif list_number and n == list_number and w == wire.BYTES:
            items.append(_scalar(item_type, w, value, depth))
        elif t == "schemaorbool" and n == 1 and w == wire.VARINT:
            allows = bool(value)
    if items:
        return items
    if schema is not None:
        return schema
    return allows if t == "schemaorbool" else None


def _encode_union(t: str, value: Any) -> bytes:
    """A schema union's message from its JSON: a list, a schema (OrBool: allows=true), or a bool."""
    schema_number, list_number, item_type = _SCHEMA_UNIONS[t]
    if t == "schemaorbool":
        if isinstance(value, bool):
            return wire.key(1, wire.VARINT) + (b"\x01" if value else b"\x00")
        if isinstance(value, dict):
            return (
                wire.key(1, wire.VARINT)
                + b"\x01"
                + wire.record(2, encode_message(value, extensiontables.SCHEMA))
            )
    elif isinstance(value, list):
        return b"".join(_field_bytes(list_number, item_type, item) for item in value)
    elif isinstance(value, dict):
        return wire.record(schema_number, encode_message(value, extensiontables.SCHEMA))
    raise CodecError(f"cannot encode {type(value).__name__} as {t}")


def _list_items(data: bytes, message: str, depth: int) -> list[Any]:
    (field,) = MESSAGES[message]
    return [_scalar(field[2], w, v, depth) for n, w, v in wire.fields(data) if n == field[0]]


def decode_message(data: bytes, message: str, depth: int = 0) -> Obj:
    """The JSON object of one message's bytes."""
    if depth > MAX_DEPTH:
        raise CodecError("proto: exceeded max depth")
    spec = _BY_NUMBER[message]
    omit_zero = OMIT_ZERO.get(message, frozenset())
    obj: Obj = {}
    for number, w, value in wire.fields(data):
        field = spec.get(number)
        if field is None:
            continue  # unknown to this version: dropped, as upstream's generated unmarshallers skip it
        _, name, t, label = field
        if label == "" and w == wire.BYTES and (t == "string" or t in MESSAGES):  # the common cases, inline
            if t == "string":
                if value:
                    obj[name] = value.decode(errors="replace")  # type: ignore[union-attr]
                else:
                    obj.pop(name, None)
            else:
                obj[name] = decode_message(value, t, depth + 1)  # type: ignore[arg-type]
        elif label == "" and w == wire.VARINT and t in _VARINT_TYPES:
            number_value = bool(value) if t == "bool" else wire.signed(value)  # type: ignore[arg-type]
            if not number_value and name in omit_zero:
                obj.pop(name, None)
            else:
                obj[name] = number_value
        elif label == "repeated" and w == wire.BYTES and t in MESSAGES:
            obj.setdefault(name, []).append(decode_message(value, t, depth + 1))  # type: ignore[arg-type]
        elif label == "":
            out = _scalar(t, w, value, depth)
            if out is None or (out == "" and t in ("string", "bytes")) or (not out and name in omit_zero):
                obj.pop(name, None)
            else:
                obj[name] = out
        elif label == "repeated":
            if t == "int" and w == wire.BYTES:  # a packed list
                obj.setdefault(name, []).extend(_packed(value))  # type: ignore[arg-type]
            else:
                obj.setdefault(name, []).append(_scalar(t, w, value, depth))
        elif label == "map":
            key, item = _map_entry(value, t, w, depth)
            obj.setdefault(name, {})[key] = item
        elif label == "inline":
            if w != wire.BYTES:
                raise CodecError(f"proto: wrong wireType = {w} for field {name}")
            obj.update(decode_message(value, t, depth + 1))  # type: ignore[arg-type]
        else:  # list: a named slice type, a wrapper message on the wire
            if w != wire.BYTES:
                raise CodecError(f"proto: wrong wireType = {w} for field {name}")
            obj[name] = _list_items(value, t, depth + 1)  # type: ignore[arg-type]
    return obj


def _packed(data: bytes) -> list[int]:
    out = []
    pos = 0
    while pos < len(data):
        value, pos = wire.read_varint(data, pos)
        out.append(wire.signed(value))
    return out


def _map_entry(value: int | bytes, t: str, w: int, depth: int) -> tuple[str, Any]:
    if w != wire.BYTES:
        raise CodecError(f"proto: wrong wireType = {w} for a map entry")
    key = ""
    item: Any = None
    seen_value = False
    for n, fw, v in wire.fields(value):  # type: ignore[arg-type]
        if n == 1 and fw == wire.BYTES:
            key = v.decode(errors="replace")  # type: ignore[union-attr]
        elif n == 2:
            item = _list_items(v, t, depth + 1) if t in MESSAGES and _is_list(t) else _scalar(t, fw, v, depth)  # type: ignore[arg-type]
            seen_value = True
    if not seen_value:
        item = _zero(t)
    return key, item


def _is_list(message: str) -> bool:
    fields = MESSAGES[message]
    return len(fields) == 1 and fields[0][1] == "items"


def _zero(t: str) -> Any:
    return {"string": "", "bytes": "", "bool": False, "int": 0, "quantity": "0"}.get(
        t, {} if t in MESSAGES else None
    )


# --- encoding: JSON -> protobuf -----------------------------------------------------------------------


def _encode_time(text: Any, micro: bool) -> bytes:
    if not isinstance(text, str):
        raise CodecError(f"cannot encode {text!r} as a time")
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CodecError(f"cannot encode {text!r} as a time") from None
    seconds = int(when.timestamp()) if when.tzinfo else int(when.replace(tzinfo=dt.UTC).timestamp())
    nanos = when.microsecond * 1000 if micro else 0
    return wire.key(1, wire.VARINT) + wire.varint(seconds) + wire.key(2, wire.VARINT) + wire.varint(nanos)


def _duration_nanos(text: Any) -> int:
    if isinstance(text, int):
        return text
    total = 0.0
    body = str(text)
    sign = -1 if body.startswith("-") else 1
    body = body.lstrip("+-")
    if body == "0":
        return 0
    pos = 0
    for m in _GO_DURATION.finditer(body):
        if m.start() != pos:
            raise CodecError(f"time: invalid duration {text!r}")
        total += float(m.group(1)) * _UNIT_NANOS[m.group(2)]
        pos = m.end()
    if pos != len(body) or not body:
        raise CodecError(f"time: invalid duration {text!r}")
    return sign * int(round(total))


def _raw_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _encode_value(t: str, value: Any) -> tuple[int, bytes]:
    """(wire type, payload) of one value; a varint payload is the varint itself."""
    if t == "string":
        return wire.BYTES, str(value).encode()
    if t == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise CodecError(f"cannot encode {value!r} as an integer")
        return wire.VARINT, wire.varint(value)
    if t == "bool":
        return wire.VARINT, b"\x01" if value else b"\x00"
    if t == "bytes":
        try:
            return wire.BYTES, base64.b64decode(str(value), validate=False)
        except (binascii.Error, ValueError):
            raise CodecError(f"cannot encode {value!r} as bytes") from None
    if t == "time" or t == "microtime":
        return wire.BYTES, _encode_time(value, t == "microtime")
    if t == "quantity":
        return wire.BYTES, wire.record(1, str(value).encode())
    if t == "intorstring":
        if isinstance(value, str):
            payload = wire.key(1, wire.VARINT) + b"\x01" + wire.key(2, wire.VARINT) + b"\x00"
            return wire.BYTES, payload + wire.record(3, value.encode())
        payload = wire.key(1, wire.VARINT) + b"\x00" + wire.key(2, wire.VARINT) + wire.varint(int(value))
        return wire.BYTES, payload + wire.record(3, b"")
    if t == "rawextension" or t == "fieldsv1":
        return wire.BYTES, wire.record(1, _raw_bytes(value))
    if t == "json":  # apiextensions' JSON: a null value is an empty message (upstream keeps no raw for it)
        return wire.BYTES, b"" if value is None else wire.record(1, _raw_bytes(value))
    if t in _SCHEMA_UNIONS:
        return wire.BYTES, _encode_union(t, value)
    if t == "double":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CodecError(f"cannot encode {value!r} as a number")
        try:
            return wire.FIXED64, struct.pack("<d", float(value))
        except OverflowError:
            raise CodecError(f"cannot encode {value!r} as a float64") from None
    if t == "duration":
        return wire.BYTES, wire.key(1, wire.VARINT) + wire.varint(_duration_nanos(value))
    if not isinstance(value, dict):
        raise CodecError(f"cannot encode {type(value).__name__} as {t}")
    return wire.BYTES, encode_message(value, t)


def _fast(tag: bytes, t: str, value: Any) -> bytes:
    """One field's bytes with its tag computed once; strings, messages and small ints without detours."""
    if t == "string":
        if type(value) is str:
            data = value.encode()
            return tag + varint(len(data)) + data
    elif t in MESSAGES:
        if type(value) is dict:
            data = encode_message(value, t)
            return tag + varint(len(data)) + data
    elif t == "int":
        if type(value) is int:
            return tag + varint(value)
    elif t == "bool":
        return tag + (b"\x01" if value else b"\x00")
    w, payload = _encode_value(t, value)
    return tag + (varint(len(payload)) + payload if w == wire.BYTES else payload)


def _field_bytes(number: int, t: str, value: Any) -> bytes:
    w, payload = _encode_value(t, value)
    if w != wire.BYTES:
        return wire.key(number, w) + payload
    return wire.record(number, payload)


def encode_message(obj: Obj, message: str) -> bytes:
    """One message's bytes, fields in number order as Go writes them; absent and null fields omitted."""
    out: list[bytes] = []
    append = out.append
    for number, name, t, label, tag in _ENCODE[message]:
        if label == "inline":
            append(wire.record(number, encode_message(obj, t)))
            continue
        value = obj.get(name)
        if value is None:
            continue
        if label == "":
            append(_fast(tag, t, value))
        elif label == "repeated":
            if not isinstance(value, list):
                raise CodecError(f"cannot encode {name}: not a list")
            for item in value:
                append(_fast(tag, t, item))
        elif label == "map":
            if not isinstance(value, dict):
                raise CodecError(f"cannot encode {name}: not an object")
            for key in sorted(value):
                item = value[key]
                entry = wire.record(1, str(key).encode())
                if t in MESSAGES and _is_list(t):
                    entry += wire.record(2, _list_message(t, item))
                elif item is not None:
                    entry += _field_bytes(2, t, item)
                else:
                    entry += wire.record(2, b"")
                append(wire.record(number, entry))
        else:  # list wrapper
            append(wire.record(number, _list_message(t, value)))
    return b"".join(out)


def _list_message(message: str, items: Any) -> bytes:
    (number, _, t, _) = MESSAGES[message][0]
    if not isinstance(items, list):
        raise CodecError("cannot encode a list: not a list")
    return b"".join(_field_bytes(number, t, item) for item in items)


# --- the k8s\0 envelope (runtime.Unknown) -------------------------------------------------------------

MAGIC = b"k8s\x00"


def encode_envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    """`k8s\\0` + runtime.Unknown{typeMeta{apiVersion, kind}, raw, contentEncoding "", contentType ""}."""
    type_meta = wire.record(1, api_version.encode()) + wire.record(2, kind.encode())
    return MAGIC + wire.record(1, type_meta) + wire.record(2, raw) + b"\x1a\x00\x22\x00"


def split_envelope(data: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw) of an enveloped object; CodecError with upstream's texts."""
    if not data:
        raise CodecError("empty data")
    if not data.startswith(MAGIC):
        raise CodecError(
            f"provided data does not appear to be a protobuf message, expected prefix {list(MAGIC)}"
        )
    api_version = kind = ""
    raw = b""
    for number, w, value in wire.fields(data[len(MAGIC) :]):
        if number == 1 and w == wire.BYTES:
            for n, fw, v in wire.fields(value):  # type: ignore[arg-type]
                if n == 1 and fw == wire.BYTES:
                    api_version = v.decode(errors="replace")  # type: ignore[union-attr]
                elif n == 2 and fw == wire.BYTES:
                    kind = v.decode(errors="replace")  # type: ignore[union-attr]
        elif number == 2 and w == wire.BYTES:
            raw = value  # type: ignore[assignment]
    return api_version, kind, raw


def decode_envelope(data: bytes, depth: int = 0) -> tuple[Obj, str]:
    """The object in an enveloped message, with apiVersion and kind set, and its message name."""
    api_version, kind, raw = split_envelope(data)
    message = message_for(api_version, kind)
    if message is None:
        raise UnknownKind(api_version, kind)
    obj = {"kind": kind, "apiVersion": api_version} if kind else {}
    obj.update(decode_message(raw, message, depth))
    if message in _LISTS:
        obj.setdefault("items", [])
    return obj, message


class UnknownKind(CodecError):
    def __init__(self, api_version: str, kind: str) -> None:
        super().__init__(f"no kind {kind!r} is registered for version {api_version!r}")
        self.api_version = api_version
        self.kind = kind


def encode_object(obj: Obj) -> bytes:
    """The enveloped protobuf of an object (its apiVersion and kind pick the message)."""
    api_version = obj.get("apiVersion", "")
    kind = obj.get("kind", "")
    message = message_for(api_version, kind)
    if message is None:
        raise UnknownKind(api_version, kind)
    return encode_envelope(api_version, kind, encode_message(obj, message))


Encoder = Callable[[Obj], bytes]
