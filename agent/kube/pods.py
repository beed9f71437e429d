"""The pods bound to this node, as the kubelet watches them: one informer with `spec.nodeName=<node>`.

The agent thinks in pod UIDs (a pod deleted and created again under its name is another pod, with its
own worker), so the informer also indexes by UID.
"""

from __future__ import annotations

from typing import Any

from kubeclient.client import KubeClient
from kubeclient.informer import Informer, by_uid

UID_INDEX = "uid"


def node_pod_informer(client: KubeClient, node_name: str) -> Informer:
    return Informer(
        client, "/api/v1/pods", field_selector=f"spec.nodeName={node_name}", indexers={UID_INDEX: by_uid}
    )


def pod_by_uid(informer: Informer, uid: str) -> dict[str, Any] | None:
    found = informer.by_index(UID_INDEX, uid)
    return found[0] if found else None


def pod_by_name(informer: Informer, namespace: str, name: str) -> dict[str, Any] | None:
    return informer.get(f"{namespace}/{name}")
