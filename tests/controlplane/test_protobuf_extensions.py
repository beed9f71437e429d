"""CustomResourceDefinition and APIService in protobuf (upstream's apiextensions and apiregistration
generated.proto): round trips of a nested schema and of an APIService's caBundle, and the exact bytes
upstream's encoding gives for the schema unions, doubles and raw JSON values."""

from __future__ import annotations

import base64
import copy
import struct
from typing import Any

import pytest

from controlplane.apiserver.protobuf import codec, wire

SCHEMA = "ApiextensionsV1JSONSchemaProps"


def _crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["size"],
        "properties": {
            "size": {"type": "integer", "default": 3, "minimum": 0, "maximum": 10.5, "enum": [1, 3, 5]},
            "port": {
                "x-kubernetes-int-or-string": True,
                "anyOf": [{"type": "integer"}, {"type": "string"}],
            },
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "closed": {"type": "object", "additionalProperties": False},
            "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "tags": {
                "type": "array",
                "items": {"type": "string", "default": "x", "enum": ["x", "y"]},
                "x-kubernetes-list-type": "set",
            },
            "tuple": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
            "deps": {"type": "object", "dependencies": {"a": ["b", "c"], "d": {"required": ["e"]}}},
            "mode": {
                "type": "string",
                "default": "fast",
                "example": {"any": ["json", 1]},
                "x-kubernetes-validations": [{"rule": "self != 'x'", "message": "no x"}],
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.pb.example.com"},
        "spec": {
            "group": "pb.example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}},
                    "subresources": {
                        "status": {},
                        "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"},
                    },
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}
                    ],
                    "selectableFields": [{"jsonPath": ".spec.mode"}],
                }
            ],
            "conversion": {"strategy": "None"},
        },
        "status": {
            "conditions": [
                {
                    "type": "Established",
                    "status": "True",
                    "lastTransitionTime": "2026-12-05T10:00:00Z",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                }
            ],
            "acceptedNames": {"plural": "widgets", "kind": "Widget"},
            "storedVersions": ["v1"],
        },
    }


def test_crd_with_a_nested_schema_round_trips() -> None:
    crd = _crd()
    data = codec.encode_object(copy.deepcopy(crd))
    assert data.startswith(codec.MAGIC)
    assert codec.decode_envelope(data)[0] == crd
    listed = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinitionList",
        "metadata": {"resourceVersion": "7"},
        "items": [crd],
    }
    item = {k: v for k, v in crd.items() if k not in ("apiVersion", "kind")}  # list items carry no TypeMeta
    assert codec.decode_envelope(codec.encode_object(listed))[0] == {**listed, "items": [item]}


def test_schema_unions_doubles_and_json_as_upstream_writes_them() -> None:
    def encoded(schema: dict[str, Any]) -> bytes:
        return codec.encode_message(schema, SCHEMA)

    # additionalProperties (30): JSONSchemaPropsOrBool{allows = 1, schema = 2}; a schema implies allows
    assert encoded({"additionalProperties": False}) == b"\xf2\x01\x02\x08\x00"
    assert encoded({"additionalProperties": True}) == b"\xf2\x01\x02\x08\x01"
    assert (
        encoded({"additionalProperties": {"type": "string"}}) == b"\xf2\x01\x0c\x08\x01\x12\x08\x2a\x06string"
    )
    # items (24): JSONSchemaPropsOrArray{schema = 1, jSONSchemas = 2}
    assert encoded({"items": {"type": "string"}}) == b"\xc2\x01\x0a\x0a\x08\x2a\x06string"
    assert encoded({"items": [{"type": "a"}, {}]}) == b"\xc2\x01\x07\x12\x03\x2a\x01a\x12\x00"
    # dependencies (32): map entries whose value is JSONSchemaPropsOrStringArray{schema = 1, property = 2}
    assert encoded({"dependencies": {"a": ["b"]}}) == b"\x82\x02\x08\x0a\x01a\x12\x03\x12\x01b"
    # maximum (9): a double, fixed 64 bits little-endian
    assert encoded({"maximum": 10}) == b"\x49" + struct.pack("<d", 10.0)
    # default (8) and enum (20): JSON{raw = 1} with the value's JSON text; a null enum item is empty
    assert encoded({"default": {"a": 1}}) == b"\x42\x09\x0a\x07" + b'{"a":1}'
    assert encoded({"enum": ["x", None]}) == b"\xa2\x01\x05\x0a\x03" + b'"x"' + b"\xa2\x01\x00"
    assert codec.decode_message(encoded({"enum": ["x", None]}), SCHEMA) == {"enum": ["x", None]}


def test_zeros_go_writes_are_left_out_and_pointer_zeros_kept() -> None:
    """Go writes every non-pointer bool; its JSON omits the omitempty ones (nullable, uniqueItems...)
    and keeps pointer fields (x-kubernetes-preserve-unknown-fields: false, minLength: 0)."""
    data = b"".join(wire.key(number, wire.VARINT) + b"\x00" for number in (10, 12, 18, 37, 38, 39, 40, 14))
    assert codec.decode_message(data, SCHEMA) == {
        "x-kubernetes-preserve-unknown-fields": False,
        "minLength": 0,
    }
    version = wire.record(1, b"v1") + b"\x10\x00\x18\x00\x38\x00"  # served, storage, deprecated all false
    assert codec.decode_message(version, "ApiextensionsV1CustomResourceDefinitionVersion") == {
        "name": "v1",
        "served": False,
        "storage": False,
    }


def test_apiservice_with_a_ca_bundle_round_trips() -> None:
    bundle = b"-----BEGIN CERTIFICATE-----\nMIIB\x00\xff\n-----END CERTIFICATE-----\n"
    service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {
            "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
            "group": "metrics.k8s.io",
            "version": "v1beta1",
            "caBundle": base64.b64encode(bundle).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        },
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]},
    }
    data = codec.encode_object(copy.deepcopy(service))
    assert codec.decode_envelope(data)[0] == service
    _, _, raw = codec.split_envelope(data)
    spec = next(v for n, _, v in wire.fields(raw) if n == 2)
    assert (5, wire.BYTES, bundle) in wire.fields(spec)  # caBundle: the PEM bytes themselves
    # insecureSkipTLSVerify (4) false, as Go writes it, is left out of JSON
    assert codec.decode_message(spec + b"\x20\x00", "ApiregistrationV1APIServiceSpec") == service["spec"]
    listed = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIServiceList",
        "metadata": {},
        "items": [],
    }
    assert codec.decode_envelope(codec.encode_object(listed))[0] == listed


def test_a_schema_number_json_cannot_hold_is_refused() -> None:
    for bad in (float("nan"), float("inf")):
        with pytest.raises(codec.CodecError, match="unsupported value"):
            codec.decode_message(b"\x49" + struct.pack("<d", bad), SCHEMA)
    assert codec.decode_message(b"\x49" + struct.pack("<d", 1e21), SCHEMA) == {"maximum": 1e21}
    assert codec.decode_message(b"\x49" + struct.pack("<d", -2.0), SCHEMA) == {"maximum": -2}
    with pytest.raises(codec.CodecError, match="float64"):
        codec.encode_message({"maximum": 10**400}, SCHEMA)
