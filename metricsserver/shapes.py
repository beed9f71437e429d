"""metrics.k8s.io/v1beta1 objects as metrics-server serves them (k8s.io/metrics/pkg/apis/metrics):
NodeMetrics and PodMetrics with timestamp, window (a Go duration) and usage (cpu in nano-cores, memory
a BinarySI quantity, so KiB when whole), and the discovery documents of the group."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubeclient.quantity import canonical
from metricsserver.storage import ContainerUsage, Usage

Obj = dict[str, Any]
GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
_BINARY = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String(): `15s`, `20.052s`, `1m5.5s`, `500ms`."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _trim(ns / size, 9) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    secs = _trim(rest / 1e9, 9)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def _trim(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text or "0"


def cpu_quantity(cores: float) -> str:
    """resource.NewScaledQuantity(nanocores, -9): `123456789n`, canonical (`1000000n` is `1m`)."""
    return canonical(f"{int(cores * 1e9)}n")


def memory_quantity(n_bytes: int) -> str:
    """resource.NewQuantity(bytes, BinarySI): the largest binary suffix that divides it exactly."""
    if n_bytes == 0:
        return "0"
    number, exponent = n_bytes, 0
    if abs(number) >= 1024:
        while number % 1024 == 0 and exponent < 6:
            number //= 1024
            exponent += 1
    return f"{number}{_BINARY[exponent]}"


def _time(unix: float) -> str:
    return dt.datetime.fromtimestamp(int(unix), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _usage(usage: Usage) -> Obj:
    return {"cpu": cpu_quantity(usage.cpu_cores), "memory": memory_quantity(usage.memory_bytes)}


def node_metrics(node: Obj, usage: Usage) -> Obj:
    meta = node.get("metadata") or {}
    return {
        "kind": "NodeMetrics",
        "apiVersion": API_VERSION,
        "metadata": {
            "name": meta.get("name", ""),
            "creationTimestamp": _now(),
            "labels": meta.get("labels") or {},
        },
        "timestamp": _time(usage.timestamp),
        "window": go_duration(usage.window),
        "usage": _usage(usage),
    }


def pod_metrics(pod: Obj, containers: list[ContainerUsage]) -> Obj:
    meta = pod.get("metadata") or {}
    newest = max(containers, key=lambda c: c.usage.timestamp).usage
    return {
        "kind": "PodMetrics",
        "apiVersion": API_VERSION,
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "creationTimestamp": _now(),
            "labels": meta.get("labels") or {},
        },
        "timestamp": _time(newest.timestamp),
        "window": go_duration(newest.window),
        "containers": [{"name": c.name, "usage": _usage(c.usage)} for c in containers],
    }


def metrics_list(kind: str, items: list[Obj]) -> Obj:
    return {"kind": f"{kind}List", "apiVersion": API_VERSION, "metadata": {}, "items": items}


def _gv() -> Obj:
    return {"groupVersion": API_VERSION, "version": VERSION}


def api_group() -> Obj:
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [_gv()],
        "preferredVersion": _gv(),
    }


def api_group_list() -> Obj:
    group = api_group()
    group.pop("kind")
    group.pop("apiVersion")
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def resource_list() -> Obj:
    def entry(name: str, kind: str, namespaced: bool) -> Obj:
        return {
            "name": name,
            "singularName": "",
            "namespaced": namespaced,
            "kind": kind,
            "verbs": ["get", "list"],
        }

    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [entry("nodes", "NodeMetrics", False), entry("pods", "PodMetrics", True)],
    }
