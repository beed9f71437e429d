"""Decoding of Kubernetes protobuf request bodies for the few kinds kubectl's generators send that way.

kubectl 1.32 posts `application/vnd.kubernetes.protobuf` from its typed clients (`kubectl create
namespace|configmap|secret|serviceaccount ...`) and does not fall back to JSON on 415. The wire format is
the 4-byte magic `k8s\\0` and a runtime.Unknown envelope (typeMeta=1, raw=2) around the object's own
message. Each kind module declares its message (`Kind.protobuf`: upstream's generated.proto field
numbers, only the fields those generators set) from the shared messages here. Other kinds still get
415 (kubectl apply/create -f use JSON and cover everything). The result is a plain JSON object, decoded
and checked against the kind's schema like any other body.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

from controlplane.apiserver.errors import ApiError, bad_request

MAGIC = b"k8s\x00"
Schema = dict[int, tuple[str, str, Any]]

OWNER_REFERENCE: Schema = {
    1: ("kind", "string", None),
    3: ("name", "string", None),
    4: ("uid", "string", None),
    5: ("apiVersion", "string", None),
    6: ("controller", "bool*", None),
    7: ("blockOwnerDeletion", "bool*", None),
}
OBJECT_META: Schema = {
    1: ("name", "string", None),
    2: ("generateName", "string", None),
    3: ("namespace", "string", None),
    5: ("uid", "string", None),
    6: ("resourceVersion", "string", None),
    7: ("generation", "int", None),
    11: ("labels", "map", "string"),
    12: ("annotations", "map", "string"),
    13: ("ownerReferences", "messages", OWNER_REFERENCE),
    14: ("finalizers", "strings", None),
}
OBJECT_REFERENCE: Schema = {
    1: ("kind", "string", None),
    2: ("namespace", "string", None),
    3: ("name", "string", None),
    4: ("uid", "string", None),
    5: ("apiVersion", "string", None),
    6: ("resourceVersion", "string", None),
    7: ("fieldPath", "string", None),
}
LABEL_SELECTOR: Schema = {
    1: ("matchLabels", "map", "string"),
    2: (
        "matchExpressions",
        "messages",
        {1: ("key", "string", None), 2: ("operator", "string", None), 3: ("values", "strings", None)},
    ),
}
CONTAINER: Schema = {
    1: ("name", "string", None),
    2: ("image", "string", None),
    3: ("command", "strings", None),
    4: ("args", "strings", None),
    5: ("workingDir", "string", None),
    6: (
        "ports",
        "messages",
        {
            1: ("name", "string", None),
            2: ("hostPort", "int", None),
            3: ("containerPort", "int", None),
            4: ("protocol", "string", None),
        },
    ),
    7: ("env", "messages", {1: ("name", "string", None), 2: ("value", "string", None)}),
    8: ("resources", "message", {}),
    13: ("terminationMessagePath", "string", None),
    14: ("imagePullPolicy", "string", None),
    20: ("terminationMessagePolicy", "string", None),
}
POD_SPEC: Schema = {
    2: ("containers", "messages", CONTAINER),
    3: ("restartPolicy", "string", None),
    4: ("terminationGracePeriodSeconds", "int*", None),
    6: ("dnsPolicy", "string", None),
    7: ("nodeSelector", "map", "string"),
    8: ("serviceAccountName", "string", None),
    10: ("nodeName", "string", None),
    19: ("schedulerName", "string", None),
    20: ("initContainers", "messages", CONTAINER),
}
TEMPLATE: Schema = {1: ("metadata", "message", OBJECT_META), 2: ("spec", "message", POD_SPEC)}
INT_OR_STRING: Schema = {1: ("type", "int", None), 2: ("intVal", "int", None), 3: ("strVal", "string", None)}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise bad_request("protobuf: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise bad_request(f"protobuf: unsupported wire type {wire}")
    return out


def _text(value: int | bytes) -> str:
    # Go does not check UTF-8 here and its JSON encoder replaces what is invalid; so do we.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for number, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue
        name, kind, sub = spec
        # Go writes zero values of plain fields; they mean "unset". Pointer fields (kind ending in *)
        # keep them, as a zero replica count is a real value.
        if kind == "string":
            if value:
                obj[name] = _text(value)
        elif kind in ("bool", "bool*"):
            if value or kind == "bool*":
                obj[name] = bool(value)
        elif kind in ("int", "int*"):
            number = int(value) if isinstance(value, int) else 0
            if number >= 1 << 63:
                number -= 1 << 64
            if number or kind == "int*":
                obj[name] = number
        elif kind == "strings":
            obj.setdefault(name, []).append(_text(value))
        elif kind == "intorstring" and isinstance(value, bytes):
            parsed = _message(value, sub)
            obj[name] = parsed.get("strVal", "") if parsed.get("type") == 1 else parsed.get("intVal", 0)
        elif kind == "bytes" and isinstance(value, bytes):
            if value:
                obj[name] = base64.b64encode(value).decode()
        elif kind == "time" and isinstance(value, bytes):
            # metav1.Time: {seconds=1, nanos=2}, written as RFC 3339 to the second.
            seconds = _message(value, {1: ("seconds", "int", None)}).get("seconds", 0)
            obj[name] = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        elif kind == "message" and isinstance(value, bytes):
            obj[name] = _message(value, sub)
        elif kind == "messages" and isinstance(value, bytes):
            obj.setdefault(name, []).append(_message(value, sub))
        elif kind == "map" and isinstance(value, bytes):
            entry = dict(_fields(value))
            key = _text(entry.get(1, b""))
            raw = entry.get(2, b"")
            if sub == "bytes":
                obj.setdefault(name, {})[key] = base64.b64encode(
                    raw if isinstance(raw, bytes) else b""
                ).decode()
            elif sub == "quantity":  # resource.Quantity is a message {string = 1}
                quantity = dict(_fields(raw)) if isinstance(raw, bytes) else {}
                obj.setdefault(name, {})[key] = _text(quantity.get(1, b""))
            else:
                obj.setdefault(name, {})[key] = _text(raw)
    return obj


def decode(body: bytes, schemas: Mapping[tuple[str, str], Schema]) -> dict[str, Any]:
    """The object in a protobuf body; `schemas` are the messages of the kinds accepted, by (apiVersion, kind)."""
    if not body.startswith(MAGIC):
        raise bad_request("protobuf: missing the k8s magic prefix")
    envelope = dict(_fields(body[len(MAGIC) :]))
    type_meta = envelope.get(1, b"")
    meta = dict(_fields(type_meta)) if isinstance(type_meta, bytes) else {}
    api_version = _text(meta.get(1, b""))
    kind = _text(meta.get(2, b""))
    schema = schemas.get((api_version, kind))
    if schema is None:
        accepted = ", ".join(sorted({k for _, k in schemas}))
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"protobuf bodies are accepted for {accepted} only, not {kind or 'this kind'}; "
            "send application/json (kubectl apply -f / create -f do)",
        )
    raw = envelope.get(2, b"")
    obj = _message(raw if isinstance(raw, bytes) else b"", schema)
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj
