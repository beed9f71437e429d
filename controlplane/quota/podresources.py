"""What a pod asks for, as upstream's resource helpers compute it (pkg/api/v1/resource: PodRequests,
PodLimits) and its QoS class (BestEffort or not): the containers' sum, each restartable (sidecar) init
container added to it, the largest init container step (a regular init container runs beside the
sidecars started before it), then the pod overhead. Quota charges this; LimitRanger's Pod limits check it.
"""

from __future__ import annotations

from typing import Any

from controlplane.quota.resources import Resources, add, maximum, parse

Obj = dict[str, Any]
QOS_RESOURCES = ("cpu", "memory")


def _containers(spec: Obj, field: str) -> list[Obj]:
    return [c for c in spec.get(field) or [] if isinstance(c, dict)]


def container_resources(container: Obj, which: str) -> Resources:
    return parse((container.get("resources") or {}).get(which))


def pod_resources(pod: Obj, which: str) -> Resources:
    """`which` is "requests" or "limits"."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in _containers(spec, "containers"):
        total = add(total, container_resources(container, which))
    sidecars: Resources = {}
    init_max: Resources = {}
    for container in _containers(spec, "initContainers"):
        own = container_resources(container, which)
        if container.get("restartPolicy") == "Always":
            total = add(total, own)
            sidecars = add(sidecars, own)
            step = dict(sidecars)
        else:
            step = add(own, sidecars)
        init_max = maximum(init_max, step)
    total = maximum(total, init_max)
    overhead = parse(spec.get("overhead"))
    if which == "requests":
        return add(total, overhead)
    # Limits get the overhead only where a limit is set (a missing limit stays unbounded).
    return add(total, {n: q for n, q in overhead.items() if n in total})


def is_best_effort(pod: Obj) -> bool:
    """GetPodQOS == BestEffort: no container asks for or is limited in cpu or memory."""
    spec = pod.get("spec") or {}
    for container in _containers(spec, "containers") + _containers(spec, "initContainers"):
        for which in ("requests", "limits"):
            values = container_resources(container, which)
            if any(name in values and not values[name].is_zero() for name in QOS_RESOURCES):
                return False
    return True
