"""/openapi/v2 and /openapi/v3 documents: enough for kubectl's validation and patch paths.

kubectl 1.32 decides how to validate `apply`/`create` from OpenAPI v3: when the PATCH operation of a
kind lists the `fieldValidation` query parameter, it leaves validation to the server (which we do,
including fieldValidation=Strict). Our PATCH operations do not advertise strategic-merge in their request
bodies, so kubectl builds apply's strategic merge patch from its own compiled-in type metadata (the
same patchMergeKey facts our server applies) instead of reading schemas we would have to hand-write.
The v2 document is served as JSON only; protobuf requests get 406, which kubectl tolerates.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.smp_schema import ListSpec
from kubeclient.version import KUBERNETES_VERSION

if TYPE_CHECKING:
    from controlplane.apiserver.kindtable import KindTable

Obj = dict[str, Any]

_REF_NAME = re.compile(r"[A-Z][A-Za-z0-9]+")
_PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _definition_name(res: Kind) -> str:
    """Upstream's definition name (io.k8s.api.apps.v1.Deployment), for kinds without a schema of ours."""
    return f"io.k8s.api.{res.group.split('.')[0] or 'core'}.{res.version}.{res.kind}"


def _query_params() -> list[Obj]:
    return [
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": True}},
    ]


def _paths(res: Kind, v3: bool) -> dict[str, Obj]:
    base = f"/{_gv_path(res.group, res.version)}"
    coll = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    gvk = {"group": res.group, "version": res.version, "kind": res.kind}
    own = next(iter(res.openapi_definitions(v3)), "")
    ref = _ref(res.schema if res.schema in _fields()["types"] else own or _definition_name(res), v3)
    ok = {
        "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        if v3
        else {"description": "OK", "schema": ref}
    }

    def op(action: str, **extra: Any) -> Obj:
        return {
            "operationId": f"{action}{res.kind}",
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "responses": ok,
            **extra,
        }

    patch_op = op("patch", parameters=_query_params())
    if v3:
        patch_op["requestBody"] = {
            "content": {t: {"schema": {"type": "object"}} for t in _PATCH_TYPES},
            "required": True,
        }
    else:
        patch_op["consumes"] = list(_PATCH_TYPES)
    item: Obj = {
        "get": op("get"),
        "put": op("put", parameters=_query_params()),
        "patch": patch_op,
        "delete": op("delete"),
    }
    collection: Obj = {"get": op("list"), "post": op("post", parameters=_query_params())}
    return {coll: collection, f"{coll}/{{name}}": item}


_SCALARS: dict[str, Obj] = {
    "string": {"type": "string"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "bool": {"type": "boolean"},
    "float64": {"type": "number", "format": "double"},
    "time": {"type": "string", "format": "date-time"},
    "microtime": {"type": "string", "format": "date-time"},
    "quantity": {"type": "string"},
    "bytes": {"type": "string", "format": "byte"},
    "any": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}
_INT_OR_STRING_V2: Obj = {"type": "string", "format": "int-or-string"}
_INT_OR_STRING_V3: Obj = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
}


@cache
def _fields() -> Obj:
    return json.loads((resources.files("controlplane.apiserver") / "fields.json").read_text())


@cache
def _docs() -> Obj:
    path = resources.files("controlplane.apiserver") / "fielddocs.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _ref(name: str, v3: bool) -> Obj:
    return {"$ref": f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"}


def _type_schema(ref: str, v3: bool) -> Obj:
    if ref.startswith("[]"):
        return {"type": "array", "items": _type_schema(ref[2:], v3)}
    if ref.startswith("map["):
        return {"type": "object", "additionalProperties": _type_schema(ref[4:-1], v3)}
    if ref == "int-or-string":
        return dict(_INT_OR_STRING_V3 if v3 else _INT_OR_STRING_V2)
    if ref in _SCALARS:
        return dict(_SCALARS[ref])
    return _ref(ref, v3) if ref in _fields()["types"] else {"type": "object"}


def _merge_keys(type_name: str, smp: Any, out: dict[tuple[str, str], ListSpec]) -> None:
    """Which (type, field) lists merge by which key, found by walking our strategic-merge facts."""
    fields = _fields()["types"].get(type_name, {})
    for field, spec in (smp or {}).items():
        ref = fields.get(field)
        if ref is None:
            continue
        if isinstance(spec, ListSpec):
            out[(type_name, field)] = spec
            if spec.item and ref.startswith("[]"):
                _merge_keys(ref[2:], spec.item, out)
        elif isinstance(spec, dict):
            _merge_keys(ref, spec, out)


def _definitions(v3: bool, resources: Iterable[Kind]) -> Obj:
    """Schemas of the served kinds and every type they use, from fields.json (the Python client's
    models), with x-kubernetes-group-version-kind on the kinds and the patch merge keys we apply."""
    types = _fields()["types"]
    required = _fields()["required"]
    merge: dict[tuple[str, str], ListSpec] = {}
    roots: dict[str, list[Obj]] = {}
    own: Obj = {}  # definitions of kinds whose schema is their own (custom resources)
    for res in resources:
        own.update(res.openapi_definitions(v3))
        if res.schema not in types:
            continue
        roots.setdefault(res.schema, []).append(
            {"group": res.group, "version": res.version, "kind": res.kind}
        )
        _merge_keys(res.schema, res.smp, merge)
    wanted: list[str] = list(roots) + (["V1ObjectMeta", "V1ListMeta"] if own else [])
    seen: set[str] = set()
    out: Obj = dict(own)
    while wanted:
        name = wanted.pop()
        if name in seen or name not in types:
            continue
        seen.add(name)
        props: Obj = {}
        for field, ref in types[name].items():
            prop = _type_schema(ref, v3)
            doc = _docs().get(name, {}).get(field)
            if doc:
                prop = (
                    {"allOf": [prop], "description": doc} if "$ref" in prop else {**prop, "description": doc}
                )
            spec = merge.get((name, field))
            if spec is not None:
                prop["x-kubernetes-patch-strategy"] = "merge"
                if spec.merge_key:
                    prop["x-kubernetes-patch-merge-key"] = spec.merge_key
            props[field] = prop
            for inner in _REF_NAME.findall(ref):
                if inner in types:
                    wanted.append(inner)
        body: Obj = {"type": "object", "properties": props}
        if _docs().get(name, {}).get(""):
            body["description"] = _docs()[name][""]
        if required.get(name):
            body["required"] = required[name]
        if name in roots:
            body["x-kubernetes-group-version-kind"] = roots[name]
        out[name] = body
    if own and "V1ListMeta" not in out:
        out["V1ListMeta"] = LIST_META  # a custom resource list's metadata (no served kind's field uses it)
    return out


# metav1.ListMeta, which the client models fields.json is made from do not carry (lists are not kinds
# there) while every custom resource's list schema refers to it: without it kubectl's validation refuses
# every document once one CRD exists ("unknown model in reference").
LIST_META: Obj = {
    "type": "object",
    "description": "ListMeta describes metadata that synthetic resources must have, including lists and "
    "various status objects. A resource may have only one of {ObjectMeta, ListMeta}.",
    "properties": {
        "continue": {"type": "string"},
        "remainingItemCount": {"type": "integer", "format": "int64"},
        "resourceVersion": {"type": "string"},
        "selfLink": {"type": "string"},
    },
}


def v2_document(table: KindTable) -> Obj:
    paths: Obj = {}
    for res in table:
        paths.update(_paths(res, v3=False))
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "definitions": _definitions(v3=False, resources=table),
    }


def v3_group_version(table: KindTable, group: str, version: str) -> Obj | None:
    resources = table.by_group_version(group, version)
    if not resources:
        return None
    paths: Obj = {}
    for res in resources:
        paths.update(_paths(res, v3=True))
    schemas = _definitions(v3=True, resources=resources)
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _hash(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()


def v3_index(table: KindTable) -> tuple[Obj, dict[str, tuple[Obj, str]]]:
    """The /openapi/v3 root and its per-group-version documents with their hashes."""
    docs: dict[str, tuple[Obj, str]] = {}
    for group, version in [("", "v1"), *table.groups()]:
        doc = v3_group_version(table, group, version)
        if doc is not None:
            docs[_gv_path(group, version)] = (doc, _hash(doc))
    root = {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"} for p, (_, h) in docs.items()}}
    return root, docs
