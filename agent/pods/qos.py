"""QoS class and the pod's cgroup parent.

The class decides where the pod's cgroup lives (kubepods/, kubepods/burstable/, kubepods/besteffort/),
which is what makes the kernel reclaim from best-effort pods first. The cgroup itself is made by runc
when the sandbox starts; the agent removes it (when empty) once the pod is gone, as upstream does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubeclient.quantity import QuantityError, parse_quantity, value

CGROUP_FS = Path("/sys/fs/cgroup")


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


_QOS_RESOURCES = ("cpu", "memory")


def _positive(resources: dict[str, Any], into: dict[str, Any]) -> set[str]:
    """Add the positive cpu/memory quantities of `resources` to `into`; the names found."""
    found = set()
    for name, text in resources.items():
        if name not in _QOS_RESOURCES:
            continue
        try:
            amount = parse_quantity(text)
        except QuantityError:
            continue
        if amount > 0:
            found.add(name)
            into[name] = into.get(name, 0) + amount
    return found


def qos_class(pod: dict[str, Any]) -> str:
    """upstream's GetPodQOS: requests and limits summed over all containers, zero quantities ignored
    (a zero cpu request does not make a pod Burstable); Guaranteed when every container limits both cpu
    and memory and the summed requests equal the summed limits."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for c in _all_containers(pod):
        res = c.get("resources") or {}
        _positive(res.get("requests") or {}, requests)
        if not {"cpu", "memory"} <= _positive(res.get("limits") or {}, limits):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if (
        guaranteed
        and all(limits.get(name) == amount for name, amount in requests.items())
        and len(requests) == len(limits)
    ):
        return "Guaranteed"
    return "Burstable"


GUARANTEED_OOM_SCORE_ADJ = -997
BEST_EFFORT_OOM_SCORE_ADJ = 1000
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000


def _memory_request(container: dict[str, Any]) -> int:
    text = ((container.get("resources") or {}).get("requests") or {}).get("memory")
    return value(text) if text else 0


def _node_critical(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    return (
        spec.get("priorityClassName") == "system-node-critical"
        and int(spec.get("priority") or 0) >= SYSTEM_CRITICAL_PRIORITY
    )


def oom_score_adj(pod: dict[str, Any], container: dict[str, Any], memory_capacity: int) -> int:
    """upstream's GetContainerOOMScoreAdjust: -997 for Guaranteed (and node-critical) pods, 1000 for
    BestEffort, and for Burstable 1000 - 1000 * request / capacity, kept within 3..999 (above every
    Guaranteed container, below every BestEffort one); a sidecar scores no higher than the pod's regular
    container with the smallest request."""
    if _node_critical(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_OOM_SCORE_ADJ
    if qos == "BestEffort":
        return BEST_EFFORT_OOM_SCORE_ADJ
    capacity = max(memory_capacity, 1)
    adj = 1000 - (1000 * _memory_request(container)) // capacity
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    regular = spec.get("containers") or []
    if any(c is container or c.get("name") == container.get("name") for c in sidecars) and regular:
        smallest = min(_memory_request(c) for c in regular)
        adj = min(adj, 1000 - (1000 * smallest) // capacity)
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BEST_EFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return int(adj)


def cgroup2_unified() -> bool:
    """Whether /sys/fs/cgroup is the cgroup v2 unified hierarchy (upstream's IsCgroup2UnifiedMode)."""
    return (CGROUP_FS / "cgroup.controllers").exists()


def cgroup_parent(pod: dict[str, Any], cgroup_root: str = "/", driver: str = "cgroupfs") -> str:
    uid = pod["metadata"]["uid"]
    qos = pod.get("status", {}).get("qosClass") or qos_class(pod)
    if driver == "systemd":
        uid_part = uid.replace("-", "_")
        if qos == "Guaranteed":
            return f"kubepods-pod{uid_part}.slice"
        tier = qos.lower()
        return f"kubepods-{tier}-pod{uid_part}.slice"
    parts = [cgroup_root.rstrip("/"), "kubepods"]
    if qos != "Guaranteed":
        parts.append(qos.lower())
    parts.append(f"pod{uid}")
    return "/".join(parts) if parts[0] else "/" + "/".join(parts[1:])


def remove_pod_cgroup(parent: str) -> list[str]:
    """rmdir the pod's cgroup (and empty children) in every hierarchy; returns those still busy.

    rmdir fails on a cgroup that holds processes, so this can never disturb a running container.
    """
    busy: list[str] = []
    if (CGROUP_FS / "cgroup.controllers").exists():
        tops = [CGROUP_FS / parent.lstrip("/")]
    else:
        tops = [h / parent.lstrip("/") for h in CGROUP_FS.iterdir() if h.is_dir() and not h.is_symlink()]
    for top in tops:
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda e: -len(e[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                busy.append(dirpath)
    return busy
