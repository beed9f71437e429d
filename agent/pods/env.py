"""Container environment: env and envFrom resolved to values, and $(VAR) references expanded.

Expansion follows upstream's rules: `$(NAME)` is replaced by a variable defined earlier (or the pod's
service variables), `$$` is an escaped `$`, and a reference to an unknown name is left as written.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from agent.expansion import expand
from kubeclient import quantity

# fetch(kind, namespace, name) -> the object, or None when it does not exist.
Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]


class ConfigError(Exception):
    """The container cannot be configured yet (CreateContainerConfigError)."""


def field_value(pod: dict[str, Any], path: str, host_ip: str, pod_ip: str) -> str:
    meta = pod["metadata"]
    spec = pod.get("spec") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path not in simple:
        raise ConfigError(f"unsupported fieldPath {path!r}")
    return str(simple[path])


# Limits a container without its own take from the node's allocatable (upstream's
# MergeContainerResourceLimits; hugepages are never overcommitted, so never defaulted).
DEFAULTED_LIMITS = ("cpu", "memory", "ephemeral-storage")


def resource_value(
    pod: dict[str, Any], container: dict[str, Any], ref: dict[str, Any], node_alloc: dict[str, str]
) -> str:
    """A resourceFieldRef's value as upstream's ExtractContainerResourceValue gives it: the container's
    request or limit (a missing or zero limit is the node's allocatable) divided by the divisor and
    rounded up; cpu counted in millicores, everything else in whole units."""
    resource = ref.get("resource", "")
    if ref.get("containerName"):
        spec = pod.get("spec") or {}
        every = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        found = next((c for c in every if c.get("name") == ref["containerName"]), None)
        if found is None:
            raise ConfigError(f"container {ref['containerName']} not found")
        container = found
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not (name in DEFAULTED_LIMITS or name.startswith("hugepages-")):
        raise ConfigError(f"unsupported container resource : {resource}")
    raw = ((container.get("resources") or {}).get(kind) or {}).get(name) or "0"
    try:
        if kind == "limits" and name in DEFAULTED_LIMITS and quantity.Quantity.parse(raw).is_zero():
            raw = node_alloc.get(name) or raw
        scale = quantity.milli_value if name == "cpu" else quantity.value
        divisor = scale(ref.get("divisor") or "1")
        if divisor <= 0:
            raise ConfigError(f"invalid divisor {ref.get('divisor')!r} for {resource}")
        return str(quantity.divide_round_up(Decimal(scale(raw)), Decimal(divisor)))
    except quantity.QuantityError as err:
        raise ConfigError(f"invalid quantity for {resource}: {err}") from None


def _data(obj: dict[str, Any], secret: bool) -> dict[str, str]:
    """A ConfigMap's data, or a Secret's data decoded (plus stringData, should a server hand it back
    unmerged: upstream's API server folds it into data on write)."""
    if not secret:
        return dict(obj.get("data") or {})
    out = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    out.update(obj.get("stringData") or {})
    return out


async def resolve_env(
    pod: dict[str, Any],
    container: dict[str, Any],
    fetch: Fetch,
    host_ip: str = "",
    pod_ip: str = "",
    node_alloc: dict[str, str] | None = None,
    services: list[tuple[str, str]] | None = None,
) -> list[tuple[str, str]]:
    """The container's variables in order (envFrom first, then env, then the service variables the
    container does not set itself), values resolved and expanded; $(VAR) sees the service variables
    too, as upstream's MappingFuncFor(tmpEnv, serviceEnv)."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    order: list[str] = []
    service_vars = dict(services or [])

    def put(name: str, value: str) -> None:
        if name not in env:
            order.append(name)
        env[name] = value

    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        ref, kind = (
            (src.get("configMapRef"), "ConfigMap")
            if src.get("configMapRef")
            else (src.get("secretRef"), "Secret")
        )
        if not ref:
            continue
        obj = await fetch(kind, ns, ref["name"])
        if obj is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
        for k, v in _data(obj, kind == "Secret").items():
            put(prefix + k, v)
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var or var.get("valueFrom") is None:
            put(name, expand(var.get("value") or "", {**service_vars, **env}))
            continue
        vf = var["valueFrom"]
        if vf.get("fieldRef"):
            put(name, field_value(pod, vf["fieldRef"]["fieldPath"], host_ip, pod_ip))
        elif vf.get("resourceFieldRef"):
            put(name, resource_value(pod, container, vf["resourceFieldRef"], node_alloc or {}))
        else:
            ref, kind = (
                (vf.get("configMapKeyRef"), "ConfigMap")
                if vf.get("configMapKeyRef")
                else (vf.get("secretKeyRef"), "Secret")
            )
            if not ref:
                continue
            obj = await fetch(kind, ns, ref["name"])
            data = _data(obj, kind == "Secret") if obj is not None else None
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                if data is None:
                    raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
                raise ConfigError(f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}")
            put(name, data[ref["key"]])
    return [(k, env[k]) for k in order] + [(k, v) for k, v in service_vars.items() if k not in env]
