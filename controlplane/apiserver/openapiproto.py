"""The OpenAPI v2 document as protobuf, which kubectl asks /openapi/v2 for first
(`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) and upstream serves: gnostic's
`openapi.v2.Document` (openapiv2/OpenAPIv2.proto), built here from the JSON document with a small wire
encoder. The message layouts below are that file's field numbers; a JSON value gnostic keeps as `Any`
(defaults, enums, examples, vendor extensions) travels as its YAML text, as gnostic's reader stores it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import yaml

Obj = dict[str, Any]
# What clients ask for (kubectl: the first form) and what kube-openapi's handler answers with.
ACCEPTED = (
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)
CONTENT_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

# --- wire format ---------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s as ten bytes of two's complement
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _len(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


def _string(number: int, value: Any) -> bytes:
    return _len(number, str(value).encode()) if value not in (None, "") else b""


def _bool(number: int, value: Any) -> bytes:
    return _field(number, 0) + b"\x01" if value is True else b""


def _int(number: int, value: Any) -> bytes:
    return _field(number, 0) + _varint(int(value)) if isinstance(value, int | float) and value else b""


def _double(number: int, value: Any) -> bytes:
    if not isinstance(value, int | float) or isinstance(value, bool) or not value:
        return b""
    return _field(number, 1) + struct.pack("<d", float(value))


def _strings(number: int, values: Any) -> bytes:
    if isinstance(values, str):
        values = [values]
    return b"".join(_len(number, str(v).encode()) for v in values or [])


# --- shared messages -----------------------------------------------------------------------------------


def _any(value: Any) -> bytes:
    """Any: the value's YAML (field 2)."""
    text = yaml.safe_dump(value, default_flow_style=False, sort_keys=False, allow_unicode=True)
    return _string(2, text.removesuffix("...\n"))  # a scalar as Go's YAML writes it: no end marker


def _any_field(number: int, node: Obj, key: str) -> bytes:
    return _len(number, _any(node[key])) if key in node else b""


def _anys(number: int, values: Any) -> bytes:
    return b"".join(_len(number, _any(v)) for v in values or [])


def _extensions(number: int, node: Obj) -> bytes:
    """Vendor extensions (x-...) as NamedAny {name 1, value 2}."""
    return b"".join(
        _len(number, _string(1, key) + _len(2, _any(value)))
        for key, value in node.items()
        if key.startswith("x-")
    )


def _named(number: int, mapping: Any, encode: Callable[[Any], bytes]) -> bytes:
    """A map as gnostic's ordered Named* pairs {name 1, value 2}."""
    if not isinstance(mapping, dict):
        return b""
    return b"".join(_len(number, _string(1, k) + _len(2, encode(v))) for k, v in mapping.items())


def _external_docs(node: Any) -> bytes:
    return _string(1, node.get("description")) + _string(2, node.get("url")) + _extensions(3, node)


def _message(number: int, node: Obj, key: str, encode: Callable[[Any], bytes]) -> bytes:
    return _len(number, encode(node[key])) if isinstance(node.get(key), dict) else b""


# --- Schema (field numbers of openapi.v2.Schema) --------------------------------------------------------


def schema(node: Any) -> bytes:
    if not isinstance(node, dict):
        return b""
    out = [
        _string(1, node.get("$ref")),
        _string(2, node.get("format")),
        _string(3, node.get("title")),
        _string(4, node.get("description")),
        _any_field(5, node, "default"),
        _double(6, node.get("multipleOf")),
        _double(7, node.get("maximum")),
        _bool(8, node.get("exclusiveMaximum")),
        _double(9, node.get("minimum")),
        _bool(10, node.get("exclusiveMinimum")),
        _int(11, node.get("maxLength")),
        _int(12, node.get("minLength")),
        _string(13, node.get("pattern")),
        _int(14, node.get("maxItems")),
        _int(15, node.get("minItems")),
        _bool(16, node.get("uniqueItems")),
        _int(17, node.get("maxProperties")),
        _int(18, node.get("minProperties")),
        _strings(19, node.get("required")),
        _anys(20, node.get("enum")),
    ]
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out.append(_len(21, _len(1, schema(extra))))
    elif isinstance(extra, bool):
        out.append(_len(21, _field(2, 0) + (b"\x01" if extra else b"\x00")))
    if "type" in node:
        out.append(_len(22, _strings(1, node["type"])))
    items = node.get("items")
    if isinstance(items, dict | list):
        out.append(
            _len(23, b"".join(_len(1, schema(i)) for i in (items if isinstance(items, list) else [items])))
        )
    out += [_len(24, schema(s)) for s in node.get("allOf") or []]
    if isinstance(node.get("properties"), dict):
        out.append(_len(25, _named(1, node["properties"], schema)))
    out += [
        _string(26, node.get("discriminator")),
        _bool(27, node.get("readOnly")),
        _message(29, node, "externalDocs", _external_docs),
        _any_field(30, node, "example"),
        _extensions(31, node),
    ]
    return b"".join(out)


# --- parameters ------------------------------------------------------------------------------------------

# The JSON keys of the non-body parameter messages and of PrimitivesItems, in field-number order from
# the first shared one; the header and path layouts have no allowEmptyValue.
_PRIMITIVE_KEYS = (
    "type",
    "format",
    "items",
    "collectionFormat",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "enum",
    "multipleOf",
)
_DOUBLES = {"maximum", "minimum", "multipleOf"}
_BOOLS = {"exclusiveMaximum", "exclusiveMinimum", "uniqueItems"}
_INTS = {"maxLength", "minLength", "maxItems", "minItems"}


def _primitive_fields(node: Obj, first: int) -> bytes:
    out = []
    for offset, key in enumerate(_PRIMITIVE_KEYS):
        number = first + offset
        value = node.get(key)
        if key == "items":
            out.append(_len(number, primitives_items(value)) if isinstance(value, dict) else b"")
        elif key in ("default",):
            out.append(_any_field(number, node, key))
        elif key == "enum":
            out.append(_anys(number, value))
        elif key in _DOUBLES:
            out.append(_double(number, value))
        elif key in _BOOLS:
            out.append(_bool(number, value))
        elif key in _INTS:
            out.append(_int(number, value))
        else:
            out.append(_string(number, value))
    return b"".join(out)


def primitives_items(node: Obj) -> bytes:
    return _primitive_fields(node, 1) + _extensions(18, node)


def _flat(param: Obj) -> Obj:
    """A non-body parameter written with a v3-style `schema` carries its type there."""
    inner = param.get("schema")
    return {**inner, **param} if isinstance(inner, dict) else param


def _non_body(param: Obj) -> bytes:
    flat = _flat(param)
    head = _bool(1, flat.get("required")) + _string(2, flat.get("in")) + _string(3, flat.get("description"))
    head += _string(4, flat.get("name"))
    where = flat.get("in")
    if where in ("query", "formData"):  # QueryParameterSubSchema 3, FormDataParameterSubSchema 2
        body = (
            head + _bool(5, flat.get("allowEmptyValue")) + _primitive_fields(flat, 6) + _extensions(23, flat)
        )
        return _len(3 if where == "query" else 2, body)
    body = head + _primitive_fields(flat, 5) + _extensions(22, flat)  # header 1, path 4
    return _len(1 if where == "header" else 4, body)


def parameter(param: Any) -> bytes:
    """Parameter: body_parameter 1 or non_body_parameter 2."""
    if not isinstance(param, dict):
        return b""
    if param.get("in") == "body":
        body = (
            _string(1, param.get("description"))
            + _string(2, param.get("name"))
            + _string(3, param.get("in"))
            + _bool(4, param.get("required"))
            + _message(5, param, "schema", schema)
            + _extensions(6, param)
        )
        return _len(1, body)
    return _len(2, _non_body(param))


def _parameters_item(param: Any) -> bytes:
    """ParametersItem: parameter 1 or json_reference 2."""
    if isinstance(param, dict) and "$ref" in param:
        return _len(2, _string(1, param["$ref"]) + _string(2, param.get("description")))
    return _len(1, parameter(param))


# --- paths -----------------------------------------------------------------------------------------------


def _response_body(node: Any) -> bytes:
    """Response: description 1, schema 2 (SchemaItem.schema), vendor extensions 5."""
    if not isinstance(node, dict):
        return b""
    body = _string(1, node.get("description"))
    if isinstance(node.get("schema"), dict):
        body += _len(2, _len(1, schema(node["schema"])))
    return body + _extensions(5, node)


def _response(node: Any) -> bytes:
    """ResponseValue: response 1 or json_reference 2."""
    if isinstance(node, dict) and "$ref" in node:
        return _len(2, _string(1, node["$ref"]) + _string(2, node.get("description")))
    return _len(1, _response_body(node))


def _operation(op: Any) -> bytes:
    if not isinstance(op, dict):
        return b""
    out = [
        _strings(1, op.get("tags")),
        _string(2, op.get("summary")),
        _string(3, op.get("description")),
        _message(4, op, "externalDocs", _external_docs),
        _string(5, op.get("operationId")),
        _strings(6, op.get("produces")),
        _strings(7, op.get("consumes")),
        *(_len(8, _parameters_item(p)) for p in op.get("parameters") or []),
    ]
    responses = op.get("responses")
    if isinstance(responses, dict):
        codes = {k: v for k, v in responses.items() if not k.startswith("x-")}
        out.append(_len(9, _named(1, codes, _response) + _extensions(2, responses)))
    out += [_strings(10, op.get("schemes")), _bool(11, op.get("deprecated")), _extensions(13, op)]
    return b"".join(out)


_VERBS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def _path_item(item: Any) -> bytes:
    if not isinstance(item, dict):
        return b""
    out = [_string(1, item.get("$ref"))]
    out += [_len(n, _operation(item[verb])) for verb, n in _VERBS.items() if isinstance(item.get(verb), dict)]
    out += [_len(9, _parameters_item(p)) for p in item.get("parameters") or []]
    out.append(_extensions(10, item))
    return b"".join(out)


def _paths(paths: Any) -> bytes:
    routes = {k: v for k, v in paths.items() if not k.startswith("x-")}
    return _extensions(1, paths) + _named(2, routes, _path_item)


# --- document --------------------------------------------------------------------------------------------


def _info(info: Any) -> bytes:
    return (
        _string(1, info.get("title"))
        + _string(2, info.get("version"))
        + _string(3, info.get("description"))
        + _string(4, info.get("termsOfService"))
        + _extensions(7, info)
    )


def _security_definition(node: Any) -> bytes:
    """SecurityDefinitionsItem: basic 1, apiKey 2 (the kinds an API server publishes)."""
    if not isinstance(node, dict):
        return b""
    if node.get("type") == "apiKey":
        body = _string(1, "apiKey") + _string(2, node.get("name")) + _string(3, node.get("in"))
        return _len(2, body + _string(4, node.get("description")) + _extensions(5, node))
    return _len(1, _string(1, node.get("type")) + _string(2, node.get("description")) + _extensions(3, node))


def _security_requirement(node: Any) -> bytes:
    return _named(1, node, lambda scopes: _strings(1, scopes))


def document(doc: Obj) -> bytes:
    """The whole openapi.v2.Document."""
    out = [
        _string(1, doc.get("swagger")),
        _message(2, doc, "info", _info),
        _string(3, doc.get("host")),
        _string(4, doc.get("basePath")),
        _strings(5, doc.get("schemes")),
        _strings(6, doc.get("consumes")),
        _strings(7, doc.get("produces")),
        _message(8, doc, "paths", _paths),
    ]
    if isinstance(doc.get("definitions"), dict):
        out.append(_len(9, _named(1, doc["definitions"], schema)))
    if isinstance(doc.get("parameters"), dict):
        out.append(_len(10, _named(1, doc["parameters"], parameter)))
    if isinstance(doc.get("responses"), dict):
        out.append(_len(11, _named(1, doc["responses"], _response_body)))
    out += [_len(12, _security_requirement(s)) for s in doc.get("security") or []]
    if isinstance(doc.get("securityDefinitions"), dict):
        out.append(_len(13, _named(1, doc["securityDefinitions"], _security_definition)))
    for tag in doc.get("tags") or []:
        body = _string(1, tag.get("name")) + _string(2, tag.get("description"))
        out.append(_len(14, body + _message(3, tag, "externalDocs", _external_docs) + _extensions(4, tag)))
    out += [_message(15, doc, "externalDocs", _external_docs), _extensions(16, doc)]
    return b"".join(out)
