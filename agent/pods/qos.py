"""QoS class and the pod's cgroup parent.

The class decides where the pod's cgroup lives (kubepods/, kubepods/burstable/, kubepods/besteffort/),
which is what makes the kernel reclaim from best-effort pods first. The cgroup itself is made by runc
when the sandbox starts; the agent removes it (when empty) once the pod is gone, as upstream does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubeclient.quantity import QuantityError, parse_quantity

CGROUP_FS = Path("/sys/fs/cgroup")


def _all_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def qos_class(pod: dict[str, Any]) -> str:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for c in _all_containers(pod):
        res = c.get("resources") or {}
        req = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        lim = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        requests.update(req)
        limits.update(lim)
        if set(lim) != {"cpu", "memory"}:
            guaranteed = False
        for k, v in req.items():
            try:
                if k not in lim or parse_quantity(v) != parse_quantity(lim[k]):
                    guaranteed = False
            except QuantityError:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


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
