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
    """Events from source `kubelet` on this node, as upstream's kubelet reports them."""
    return EventRecorder(client, EventSource("kubelet", node_name))


def container_field(kind: str, name: str) -> str:
    return f"spec.{'initContainers' if kind == 'init' else 'containers'}{{{name}}}"


def field_of(pod: dict[str, Any], name: str) -> str:
    """The fieldPath of the pod's container `name`, init or app, for an event about it."""
    init = (pod.get("spec") or {}).get("initContainers") or []
    return container_field("init" if any(c["name"] == name for c in init) else "app", name)
