"""The OpenAPI v2 protobuf encoder against hand-computed wire bytes of gnostic's openapi.v2 messages."""

from __future__ import annotations

from controlplane.apiserver.openapiproto import document


def test_document_fields_and_a_schema_with_an_extension() -> None:
    doc = {
        "swagger": "2.0",
        "info": {"title": "T", "version": "v"},
        "definitions": {"A": {"type": "object", "x-k": 1}},
    }
    type_item = b"\xb2\x01\x08" + b"\x0a\x06object"  # Schema.type (22) = TypeItem{value: "object"}
    any_yaml = b"\x12\x02" + b"1\n"  # Any.yaml (2)
    extension = b"\xfa\x01\x0b" + b"\x0a\x03x-k" + b"\x12\x04" + any_yaml  # Schema.vendor_extension (31)
    schema = type_item + extension
    named = b"\x0a\x01A" + b"\x12" + bytes([len(schema)]) + schema  # NamedSchema{name, value}
    definitions = b"\x0a" + bytes([len(named)]) + named  # Definitions.additional_properties (1)
    expected = (
        b"\x0a\x032.0"  # Document.swagger (1)
        + b"\x12\x06"
        + b"\x0a\x01T"
        + b"\x12\x01v"  # Document.info (2) = Info{title 1, version 2}
        + b"\x4a"
        + bytes([len(definitions)])
        + definitions  # Document.definitions (9)
    )
    assert document(doc) == expected


def test_paths_operations_parameters_and_responses() -> None:
    doc = {
        "paths": {
            "/p": {
                "get": {
                    "operationId": "o",
                    "parameters": [{"name": "q", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "OK"}},
                }
            }
        }
    }
    query = b"\x12\x05query" + b"\x22\x01q" + b"\x32\x06string"  # in 2, name 4, type 6
    parameter = (
        b"\x12" + bytes([len(query) + 2]) + b"\x1a" + bytes([len(query)]) + query
    )  # non_body 2 > query 3
    item = b"\x0a" + bytes([len(parameter)]) + parameter  # ParametersItem.parameter (1)
    response = b"\x0a\x02OK"  # Response.description (1)
    value = b"\x0a" + bytes([len(response)]) + response  # ResponseValue.response (1)
    code = b"\x0a\x03200" + b"\x12" + bytes([len(value)]) + value  # NamedResponseValue
    responses = b"\x0a" + bytes([len(code)]) + code  # Responses.response_code (1)
    operation = (
        b"\x2a\x01o" + b"\x42" + bytes([len(item)]) + item + b"\x4a" + bytes([len(responses)]) + responses
    )
    path_item = b"\x12" + bytes([len(operation)]) + operation  # PathItem.get (2)
    named = b"\x0a\x02/p" + b"\x12" + bytes([len(path_item)]) + path_item
    paths = b"\x12" + bytes([len(named)]) + named  # Paths.path (2)
    assert document(doc) == b"\x42" + bytes([len(paths)]) + paths  # Document.paths (8)
