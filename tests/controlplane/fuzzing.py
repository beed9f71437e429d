"""Hypothesis strategies for request bodies of every served kind, built from the decoder's own type
table: mostly well-typed objects (so the walk reaches defaulting, validation, admission and storage),
with values of any JSON type dropped in at random places (so it reaches every decoding error), and
bodies in each wire format (JSON, YAML, protobuf, and bytes that are none of them)."""

from __future__ import annotations

import base64
import json
from functools import cache
from typing import Any

import yaml
from hypothesis import strategies as st

from controlplane.apiserver import typed
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.protobuf import codec, wire
from controlplane.apiserver.smp_schema import ListSpec

MAX_DEPTH = 5

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
NAMES = st.sampled_from(
    ["a", "web-1", "x.y", "system-x", "", "Bad_Name", "a/b", "%", "..", "n" * 70]
) | st.text(max_size=10)
QUANTITIES = st.sampled_from(
    ["1", "0.5", "100m", "1.5Gi", "-1", "1e3", "lots", "", "1Ki", "12E", "0.1m", ".5", "1e999"]
)
TIMES = st.sampled_from(
    [
        "2024-01-02T03:04:05Z",
        "2024-01-02T03:04:05.123456+02:00",
        "yesterday",
        "2024-13-01T00:00:00Z",
        "2024-02-30T00:00:00Z",
        "",
        "2024-01-02T03:04:05",
    ]
)


def _base64() -> st.SearchStrategy[str]:
    return st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()) | st.text(max_size=6)


_SCALAR = {
    typed.STRING: st.text(max_size=10) | NAMES,
    typed.INT32: st.integers(min_value=-(2**31), max_value=2**31 - 1)
    | st.integers(min_value=-5, max_value=70000),
    typed.INT64: st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers(min_value=-5, max_value=100),
    typed.FLOAT: st.floats(allow_nan=False, allow_infinity=False),
    typed.BOOL: st.booleans(),
    typed.TIME: TIMES,
    typed.MICROTIME: TIMES,
    typed.QUANTITY: QUANTITIES | st.integers(min_value=-3, max_value=3),
    typed.INT_OR_STRING: st.integers(min_value=-3, max_value=70000) | st.sampled_from(["http", "25%", ""]),
    typed.BYTES: _base64(),
    typed.ANY: ANY_JSON,
}


def _corrupt(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly `good`, sometimes any JSON value at all."""
    return st.integers(0, 11).flatmap(lambda n: ANY_JSON if n == 0 else good)


@cache
def for_type(ref: str, depth: int = 0) -> st.SearchStrategy[Any]:
    t = typed.table().types[ref]
    if t.code == typed.STRUCT:
        if depth >= MAX_DEPTH:
            return st.just({})
        names = sorted(t.fields)
        refs = {name: _ref_of(ref, name) for name in names}
        return st.lists(st.sampled_from(names), max_size=4, unique=True).flatmap(
            lambda keys: st.fixed_dictionaries({k: _corrupt(for_type(refs[k], depth + 1)) for k in keys})
        )
    if t.code == typed.LIST:
        return st.lists(for_type(ref[2:], depth + 1), max_size=2)
    if t.code == typed.MAP:
        return st.dictionaries(
            NAMES | st.sampled_from(["cpu", "memory", "example.com/gpu"]),
            for_type(ref[4:-1], depth + 1),
            max_size=2,
        )
    return _SCALAR[t.code]


@cache
def _raw_types() -> dict[str, dict[str, str]]:
    return json.loads(typed.FIELDS_FILE.read_text())["types"]


def _ref_of(type_name: str, field: str) -> str:
    return _raw_types()[type_name][field]


def objects(kind: Kind) -> st.SearchStrategy[dict[str, Any]]:
    """Objects of `kind` (in its API form, as clients send them)."""
    meta = st.fixed_dictionaries(
        {"name": NAMES},
        optional={
            "labels": st.dictionaries(NAMES, NAMES, max_size=2),
            "generateName": st.sampled_from(["gen-", "Bad-"]),
            "finalizers": st.lists(
                st.sampled_from(["example.com/hold", "kubernetes", "bad finalizer"]), max_size=1
            ),
            "namespace": st.sampled_from(["other", ""]),
        },
    )
    return st.tuples(for_type(kind.schema), _corrupt(meta)).map(
        lambda pair: {**pair[0], "apiVersion": kind.api_version, "kind": kind.kind, "metadata": pair[1]}
    )


def _protobuf(kind: Kind) -> st.SearchStrategy[bytes]:
    """Protobuf bodies naming `kind`: its objects encoded (where the corrupted ones can be), the
    envelope around random message bytes, and random bytes after the magic."""

    def envelope(raw: bytes) -> bytes:
        return codec.encode_envelope(kind.api_version, kind.kind, raw)

    def encoded(obj: dict[str, Any]) -> bytes:
        try:
            return codec.encode_object(obj)
        except (codec.CodecError, ValueError, TypeError, OverflowError):
            return envelope(b"")

    return (
        objects(kind).map(encoded)
        | st.binary(max_size=60).map(envelope)
        | st.binary(max_size=30).map(lambda b: codec.MAGIC + b)
        | st.binary(max_size=40).map(lambda b: envelope(wire.record(1, b)))
    )


YAML_SNIPPETS = st.sampled_from(
    [
        "a: &x [*x]",
        "!!binary aGk=",
        "? [a, b]\n: c",
        "a: !!set {x, y}",
        "a: .nan",
        "a: 2024-01-01",
        "- a\n- b",
        "metadata: {name: a}\nkind: ConfigMap\n---\nkind: Pod",
        "{a: {b: {c: [1, 2, {d: ~}]}}}",
        "a: 1e999",
        "'\\ud800'",
        "metadata:\n  name: a\n  labels: {1: 2, true: false, ~: x}",
    ]
)


def bodies(kind: Kind) -> st.SearchStrategy[tuple[str, bytes]]:
    """(content type, body) pairs for a request about `kind`."""
    objs = objects(kind)
    as_json = objs.map(lambda o: ("application/json", json.dumps(o).encode()))
    as_yaml = objs.map(lambda o: ("application/yaml", yaml.safe_dump(o).encode()))
    garbage = st.tuples(
        st.sampled_from(["application/json", "application/yaml"]),
        st.binary(max_size=40) | YAML_SNIPPETS.map(str.encode),
    )
    choices = [as_json, as_json, as_json, as_yaml, garbage]
    if codec.message_for(kind.api_version, kind.kind):
        choices.append(_protobuf(kind).map(lambda b: ("application/vnd.kubernetes.protobuf", b)))
    return st.one_of(*choices)


def _directives(schema: Any, depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Strategic merge patches along the kind's merge-key lists, with every directive kubectl sends
    (and values of any shape in them)."""
    optional: dict[str, st.SearchStrategy[Any]] = {
        "$patch": st.sampled_from(["replace", "delete", "merge", "x"]),
        "$retainKeys": ANY_JSON,
    }
    for field, sub in (schema or {}).items():
        if isinstance(sub, ListSpec):
            items = (
                ANY_JSON
                if sub.merge_key is None
                else st.one_of(
                    ANY_JSON,
                    st.fixed_dictionaries(
                        {sub.merge_key: ANY_JSON}, optional={"$patch": st.sampled_from(["delete", "replace"])}
                    ),
                )
            )
            optional[field] = st.lists(items, max_size=3) | ANY_JSON
            optional[f"$setElementOrder/{field}"] = st.lists(items, max_size=3) | ANY_JSON
            optional[f"$deleteFromPrimitiveList/{field}"] = ANY_JSON
        elif isinstance(sub, dict) and depth < 3:
            optional[field] = _directives(sub, depth + 1) | ANY_JSON
    return st.fixed_dictionaries({}, optional=optional)


def patches(kind: Kind) -> st.SearchStrategy[tuple[str, bytes]]:
    """(patch content type, body): merge and strategic merge patches shaped like the kind, JSON patches."""
    partial = for_type(kind.schema).map(lambda o: json.dumps(o).encode())
    directives = _directives(kind.smp).map(lambda o: json.dumps(o).encode())
    ops = st.lists(
        st.fixed_dictionaries(
            {
                "op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]),
                "path": st.sampled_from(
                    [
                        "/metadata/labels/a",
                        "/spec",
                        "/spec/containers/0/image",
                        "/data/k",
                        "",
                        "/",
                        "x",
                        "/metadata/finalizers/-",
                        "/status",
                        "/metadata/name",
                        "/spec/ports/9",
                    ]
                ),
            },
            optional={"value": ANY_JSON, "from": st.sampled_from(["/metadata", "/spec", "/nope", ""])},
        ),
        max_size=3,
    )
    json_patches = ops.map(lambda o: json.dumps(o).encode()) | ANY_JSON.map(lambda o: json.dumps(o).encode())
    return st.one_of(
        partial.map(lambda b: ("application/merge-patch+json", b)),
        (partial | directives).map(lambda b: ("application/strategic-merge-patch+json", b)),
        json_patches.map(lambda b: ("application/json-patch+json", b)),
        objects(kind).map(lambda o: ("application/apply-patch+yaml", json.dumps(o).encode())),
    )
