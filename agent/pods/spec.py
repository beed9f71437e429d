"""Reading a pod's spec the same way everywhere: its init and app containers, sidecars, the restart
policy, a container by name. Pod dicts arrive from the informer unparsed; these few helpers are the one
place that knows where those fields live and what their defaults are.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def pod_spec(pod: Obj) -> Obj:
    return pod.get("spec") or {}


def init_containers(pod: Obj) -> list[Obj]:
    return list(pod_spec(pod).get("initContainers") or [])


def app_containers(pod: Obj) -> list[Obj]:
    return list(pod_spec(pod).get("containers") or [])


def ephemeral_containers(pod: Obj) -> list[Obj]:
    """spec.ephemeralContainers (added through pods/ephemeralcontainers; started once, never restarted)."""
    return list(pod_spec(pod).get("ephemeralContainers") or [])


def is_sidecar(container: Obj) -> bool:
    """An init container with restartPolicy Always (a sidecar: started in order, then kept running)."""
    return container.get("restartPolicy") == "Always"


def has_sidecars(pod: Obj) -> bool:
    return any(is_sidecar(c) for c in init_containers(pod))


def restart_policy(pod: Obj) -> str:
    return pod_spec(pod).get("restartPolicy") or "Always"


def container_spec(pod: Obj, name: str) -> Obj | None:
    """The init or app container named `name`."""
    return next((c for c in [*init_containers(pod), *app_containers(pod)] if c.get("name") == name), None)


def container_kind(pod: Obj, name: str) -> str:
    """ "init" for an init container (sidecars included), else "app"."""
    return "init" if any(c.get("name") == name for c in init_containers(pod)) else "app"


def host_network(pod: Obj) -> bool:
    return bool(pod_spec(pod).get("hostNetwork"))


def being_deleted(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def pod_ref(pod: Obj) -> str:
    """upstream's format.Pod: name_namespace(uid)"""
    m = pod["metadata"]
    return f"{m['name']}_{m['namespace']}({m['uid']})"
