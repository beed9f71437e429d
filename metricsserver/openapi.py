"""The metrics server's OpenAPI documents (/openapi/v2, /openapi/v3 and its one group-version document),
as metrics-server serves them as a generic API server: the metrics.k8s.io/v1beta1 types NodeMetrics,
NodeMetricsList, PodMetrics, PodMetricsList and ContainerMetrics with their group-version-kinds, the
read-only paths, and the apimachinery types they reference (ObjectMeta, ListMeta, Time, Quantity,
trimmed to what these objects carry). The API server's aggregator merges the v2 document into its own
and lists and proxies the v3 one, so `kubectl explain nodemetrics` works through it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from metricsserver.shapes import GROUP, VERSION

Obj = dict[str, Any]
_PKG = "io.k8s.metrics.pkg.apis.metrics.v1beta1"
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
GV_PATH = f"apis/{GROUP}/{VERSION}"


def _ref(name: str, v3: bool) -> Obj:
    return {"$ref": ("#/components/schemas/" if v3 else "#/definitions/") + name}


def _gvk(kind: str) -> list[Obj]:
    return [{"group": GROUP, "kind": kind, "version": VERSION}]


def _common(kind: str, v3: bool, list_meta: bool = False) -> Obj:
    return {
        "apiVersion": {
            "description": "APIVersion defines the versioned schema of this representation of an object.",
            "type": "string",
        },
        "kind": {
            "description": f"Kind is a string value representing the REST resource this object represents: {kind}.",
            "type": "string",
        },
        "metadata": {
            "description": "Standard list metadata." if list_meta else "Standard object's metadata.",
            **(
                {"allOf": [_ref(f"{_META}.{'ListMeta' if list_meta else 'ObjectMeta'}", v3)], "default": {}}
                if v3
                else _ref(f"{_META}.{'ListMeta' if list_meta else 'ObjectMeta'}", v3)
            ),
        },
    }


def _usage(v3: bool) -> Obj:
    return {
        "description": "The memory and CPU usage.",
        "type": "object",
        "additionalProperties": _ref(QUANTITY, v3),
    }


def _list(kind: str, item: str, v3: bool) -> Obj:
    return {
        "description": f"{kind} is a list of {item}.",
        "type": "object",
        "required": ["items"],
        "properties": {
            **_common(kind, v3, list_meta=True),
            "items": {
                "description": f"List of {item}.",
                "type": "array",
                "items": _ref(f"{_PKG}.{item}", v3),
            },
        },
        "x-kubernetes-group-version-kind": _gvk(kind),
    }


def schemas(v3: bool) -> Obj:
    window = {"description": "The window over which usage was measured (a Go duration).", "type": "string"}
    timestamp = {
        "description": "The following fields define time interval from which metrics were collected from the interval [Timestamp-Window, Timestamp].",
        **({"allOf": [_ref(f"{_META}.Time", v3)]} if v3 else _ref(f"{_META}.Time", v3)),
    }
    return {
        f"{_PKG}.ContainerMetrics": {
            "description": "ContainerMetrics sets resource usage metrics of a container.",
            "type": "object",
            "required": ["name", "usage"],
            "properties": {
                "name": {
                    "description": "Container name corresponding to the one from pod.spec.containers.",
                    "type": "string",
                },
                "usage": _usage(v3),
            },
        },
        f"{_PKG}.NodeMetrics": {
            "description": "NodeMetrics sets resource usage metrics of a node.",
            "type": "object",
            "required": ["timestamp", "window", "usage"],
            "properties": {
                **_common("NodeMetrics", v3),
                "timestamp": timestamp,
                "window": window,
                "usage": _usage(v3),
            },
            "x-kubernetes-group-version-kind": _gvk("NodeMetrics"),
        },
        f"{_PKG}.NodeMetricsList": _list("NodeMetricsList", "NodeMetrics", v3),
        f"{_PKG}.PodMetrics": {
            "description": "PodMetrics sets resource usage metrics of a pod.",
            "type": "object",
            "required": ["timestamp", "window", "containers"],
            "properties": {
                **_common("PodMetrics", v3),
                "timestamp": timestamp,
                "window": window,
                "containers": {
                    "description": "Metrics for all containers are collected within the same time window.",
                    "type": "array",
                    "items": _ref(f"{_PKG}.ContainerMetrics", v3),
                },
            },
            "x-kubernetes-group-version-kind": _gvk("PodMetrics"),
        },
        f"{_PKG}.PodMetricsList": _list("PodMetricsList", "PodMetrics", v3),
        f"{_META}.ObjectMeta": {
            "description": "ObjectMeta is metadata that all persisted resources must have.",
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                "creationTimestamp": _ref(f"{_META}.Time", v3),
            },
        },
        f"{_META}.ListMeta": {
            "description": "ListMeta describes metadata that synthetic resources must have.",
            "type": "object",
            "properties": {"resourceVersion": {"type": "string"}, "selfLink": {"type": "string"}},
        },
        f"{_META}.Time": {
            "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON.",
            "type": "string",
            "format": "date-time",
        },
        QUANTITY: {
            "description": "Quantity is a fixed-point representation of a number.",
            "type": "string",
        },
    }


def _paths(v3: bool) -> Obj:
    def op(kind: str, op_id: str, namespaced: bool, named: bool) -> Obj:
        schema = _ref(f"{_PKG}.{kind}", v3)
        ok = {
            "description": "OK",
            **({"content": {"application/json": {"schema": schema}}} if v3 else {"schema": schema}),
        }
        get: Obj = {
            "operationId": op_id,
            "tags": ["metricsV1beta1"],
            "responses": {"200": ok},
            "x-kubernetes-action": "get" if named else "list",
            # list operations name the item's kind, as upstream's generated specs do
            "x-kubernetes-group-version-kind": _gvk(kind.removesuffix("List"))[0],
        }
        out: Obj = {"get": get}
        params = []
        if named:
            params.append(
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "description": f"name of the {kind}",
                    **({"schema": {"type": "string"}} if v3 else {"type": "string"}),
                }
            )
        if namespaced:
            params.append(
                {
                    "name": "namespace",
                    "in": "path",
                    "required": True,
                    "description": "object name and auth scope",
                    **({"schema": {"type": "string"}} if v3 else {"type": "string"}),
                }
            )
        if params:
            out["parameters"] = params
        return out

    base = f"/apis/{GROUP}/{VERSION}"
    return {
        f"{base}/nodes": op("NodeMetricsList", "listMetricsV1beta1NodeMetrics", False, False),
        f"{base}/nodes/{{name}}": op("NodeMetrics", "readMetricsV1beta1NodeMetrics", False, True),
        f"{base}/pods": op("PodMetricsList", "listMetricsV1beta1PodMetricsForAllNamespaces", False, False),
        f"{base}/namespaces/{{namespace}}/pods": op(
            "PodMetricsList", "listMetricsV1beta1NamespacedPodMetrics", True, False
        ),
        f"{base}/namespaces/{{namespace}}/pods/{{name}}": op(
            "PodMetrics", "readMetricsV1beta1NamespacedPodMetrics", True, True
        ),
    }


def v2() -> Obj:
    return {
        "swagger": "2.0",
        "info": {"title": "metrics-server", "version": VERSION},
        "paths": _paths(False),
        "definitions": schemas(False),
    }


def v3_group_version() -> Obj:
    return {
        "openapi": "3.0.0",
        "info": {"title": "metrics-server", "version": VERSION},
        "paths": _paths(True),
        "components": {"schemas": schemas(True)},
    }


def doc_hash(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()


def v3_root(doc: Obj) -> Obj:
    return {"paths": {GV_PATH: {"serverRelativeURL": f"/openapi/v3/{GV_PATH}?hash={doc_hash(doc)}"}}}
