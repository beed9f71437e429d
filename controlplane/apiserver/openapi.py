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
from typing import Any

from controlplane.apiserver.resources import GROUPS, RESOURCES, Resource
from controlplane.apiserver.smp_schema import ListSpec, schema_for
from pykubelet import KUBERNETES_VERSION

Obj = dict[str, Any]

_PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _definition_name(res: Resource) -> str:
    group = res.group or "core"
    prefix = "io.k8s.api." + {"": "core", "coordination.k8s.io": "coordination", "events.k8s.io": "events",
                                  "authentication.k8s.io": "authentication"}.get(
        res.group, group
    )
    return f"{prefix}.{res.version}.{res.kind}"


def _query_params() -> list[Obj]:
    return [
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": True}},
    ]


def _paths(res: Resource, v3: bool) -> dict[str, Obj]:
    base = f"/{_gv_path(res.group, res.version)}"
    coll = f"{base}/namespaces/{{namespace}}/{res.plural}" if res.namespaced else f"{base}/{res.plural}"
    gvk = {"group": res.group, "version": res.version, "kind": res.kind}
    ref = {"$ref": f"#/components/schemas/{_definition_name(res)}" if v3 else f"#/definitions/{_definition_name(res)}"}
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}} if v3 else {"description": "OK", "schema": ref}}

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
        patch_op["requestBody"] = {"content": {t: {"schema": {"type": "object"}} for t in _PATCH_TYPES}, "required": True}
    else:
        patch_op["consumes"] = list(_PATCH_TYPES)
    item: Obj = {"get": op("get"), "put": op("put", parameters=_query_params()), "patch": patch_op, "delete": op("delete")}
    collection: Obj = {"get": op("list"), "post": op("post", parameters=_query_params())}
    return {coll: collection, f"{coll}/{{name}}": item}


def _schema(schema: Any) -> Obj:
    """Turn our strategic-merge facts into OpenAPI properties with the x-kubernetes-patch-* tags."""
    props: Obj = {}
    for field, spec in (schema or {}).items():
        if isinstance(spec, ListSpec):
            entry: Obj = {"type": "array", "items": _schema(spec.item) if spec.item else {"type": "object"}}
            entry["x-kubernetes-patch-strategy"] = "merge"
            if spec.merge_key:
                entry["x-kubernetes-patch-merge-key"] = spec.merge_key
            props[field] = entry
        else:
            props[field] = _schema(spec)
    return {"type": "object", "properties": props} if props else {"type": "object"}


def _definitions() -> Obj:
    out: Obj = {}
    for res in RESOURCES:
        body = _schema(schema_for(res.kind))
        body.setdefault("properties", {}).update(
            {"apiVersion": {"type": "string"}, "kind": {"type": "string"}}
        )
        body["x-kubernetes-group-version-kind"] = [{"group": res.group, "version": res.version, "kind": res.kind}]
        out[_definition_name(res)] = body
    return out


def v2_document() -> Obj:
    paths: Obj = {}
    for res in RESOURCES:
        paths.update(_paths(res, v3=False))
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "definitions": _definitions(),
    }


def v3_group_version(group: str, version: str) -> Obj | None:
    resources = [r for r in RESOURCES if r.group == group and r.version == version]
    if not resources:
        return None
    paths: Obj = {}
    for res in resources:
        paths.update(_paths(res, v3=True))
    schemas = {k: v for k, v in _definitions().items() if any(_definition_name(r) == k for r in resources)}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _hash(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()


def v3_index() -> tuple[Obj, dict[str, tuple[Obj, str]]]:
    """The /openapi/v3 root and its per-group-version documents with their hashes."""
    docs: dict[str, tuple[Obj, str]] = {}
    for group, version in [("", "v1"), *GROUPS]:
        doc = v3_group_version(group, version)
        if doc is not None:
            docs[_gv_path(group, version)] = (doc, _hash(doc))
    root = {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={h}"} for p, (_, h) in docs.items()}}
    return root, docs
