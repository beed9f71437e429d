"""Events about pods from this node, as the kubelet reports them (source `kubelet` on the node).

The recorder itself is the shared one (`kubeclient.events`: upstream's correlation, posting in the
background); what is the kubelet's is how it names a container in an event's fieldPath.
"""

from __future__ import annotations

from typing import Any

from kubeclient.client import KubeClient
from kubeclient.events import NORMAL, WARNING, EventRecorder, EventSource

__all__ = ["NORMAL", "WARNING", "EventRecorder", "container_field", "field_of", "kubelet_recorder"]


def kubelet_recorder(client: KubeClient | None, node_name: str) -> EventRecorder:
    """Events from source `kubelet` on this node, as upstream's kubelet reports them (and logs them: at
    verbosity 3, its makeEventRecorder's StartStructuredLogging(3))."""
    return EventRecorder(client, EventSource("kubelet", node_name), verbosity=3)


_FIELDS = {"init": "initContainers", "ephemeral": "ephemeralContainers"}


def container_field(kind: str, name: str) -> str:
    return f"spec.{_FIELDS.get(kind, 'containers')}{{{name}}}"


def field_of(pod: dict[str, Any], name: str) -> str:
    """The fieldPath of the pod's container `name`, init or app, for an event about it."""
    spec = pod.get("spec") or {}
    for kind, group in _FIELDS.items():
        if any(c["name"] == name for c in spec.get(group) or []):
            return container_field(kind, name)
    return container_field("app", name)
