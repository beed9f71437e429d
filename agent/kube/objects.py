"""Reads of the objects a pod references (ConfigMaps and Secrets for env, volumes and image pull
secrets; its claims and their volumes; its RuntimeClass), one GET by name each: a kubelet under the
Node authorizer may read only the objects of its own pods, never list a namespace.

The node keeps its pods running while the API is unreachable (every API server down, etcd without
quorum): each object read is remembered, and a read that finds the API unreachable (or answering a
5xx) gets the object as last seen, as upstream's kubelet serves its ConfigMap and Secret managers from
their caches. A remembered object is read with a single bounded attempt, so a restart during an outage
waits seconds at most, not the client's whole retry budget. Secrets are held in memory only."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("agent.kube.objects")

_KIND_PATHS = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses",
    "PersistentVolume": "/api/v1/persistentvolumes",
    "CSIDriver": "/apis/storage.k8s.io/v1/csidrivers",
    "VolumeAttachment": "/apis/storage.k8s.io/v1/volumeattachments",
}
# One attempt of this many seconds for an object already seen: the API's answer if it comes, else the copy.
SEEN_READ_DEADLINE = 3.0


def _outage(err: ApiError) -> bool:
    """The API cannot answer now (unreachable, timed out, its storage down), as opposed to an answer."""
    return err.unreachable or err.status >= 500


class ObjectReader:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._seen: dict[tuple[str, str, str], dict[str, Any] | None] = {}

    async def fetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist (other API errors are raised); the last copy seen
        while the API cannot answer."""
        where = _KIND_PATHS[kind]
        path = (
            f"{where}/{quote(name)}"  # cluster-scoped kinds are named by their full collection path
            if where.startswith("/")
            else f"/api/v1/namespaces/{quote(namespace)}/{where}/{quote(name)}"
        )
        key = (kind, namespace, name)
        seen = key in self._seen
        try:
            if seen:
                obj = await self.client.request("GET", path, retry=False, deadline=SEEN_READ_DEADLINE)
            else:
                obj = await self.client.get(path)
        except ApiError as err:
            if err.not_found:
                obj = None
            elif seen and _outage(err):
                log.info("API unreachable, %s %s/%s as last seen error=%r", kind, namespace, name, str(err))
                return self._seen[key]
            else:
                raise
        self._seen[key] = obj
        return obj
