"""Pod bodies and readers shared by the probe and lifecycle-hook scenarios (plain dicts, as a user's
YAML would be, so every probe field reaches the server exactly as written)."""

from __future__ import annotations

from typing import Any


def probe_pod(
    name: str,
    node: str,
    image: str,
    script: str,
    restart: str = "Always",
    grace: int = 5,
    ports: list[dict[str, Any]] | None = None,
    **container: Any,
) -> dict[str, Any]:
    """A one-container pod (`main`) running `script`; extra keyword arguments are container fields
    (readinessProbe=..., lifecycle=...)."""
    main: dict[str, Any] = {"name": "main", "image": image, "command": ["sh", "-c", script], **container}
    if ports:
        main["ports"] = ports
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": grace,
            "containers": [main],
        },
    }


def fast(action: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A probe that ticks every second and decides on one result, unless told otherwise."""
    return {"periodSeconds": 1, "failureThreshold": 1, **action, **fields}


def exec_action(script: str) -> dict[str, Any]:
    return {"exec": {"command": ["sh", "-c", script]}}


def read(kube: Any, namespace: str, name: str) -> Any:
    return kube.read_namespaced_pod(name, namespace)


def main_status(pod: Any) -> Any:
    return next((cs for cs in pod.status.container_statuses or [] if cs.name == "main"), None)


def conditions(pod: Any) -> dict[str, Any]:
    return {c.type: c for c in pod.status.conditions or []}


def events(kube: Any, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the pod's events, oldest first."""
    items = kube.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message or "") for e in items]


def has_event(kube: Any, namespace: str, name: str, reason: str, text: str = "") -> bool:
    return any(r == reason and text in m for r, m in events(kube, namespace, name))
