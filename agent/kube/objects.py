"""Reads of the objects a pod references (ConfigMaps and Secrets for env, volumes and image pull
secrets; its claims and their volumes; its RuntimeClass), one GET by name each: a kubelet under the
Node authorizer may read only the objects of its own pods, never list a namespace."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

_KIND_PATHS = {
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "RuntimeClass": "/apis/node.k8s.io/v1/runtimeclasses",
    "PersistentVolume": "/api/v1/persistentvolumes",
}


class ObjectReader:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def fetch(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None if it does not exist (other API errors are raised)."""
        where = _KIND_PATHS[kind]
        path = (
            f"{where}/{quote(name)}"  # cluster-scoped kinds are named by their full collection path
            if where.startswith("/")
            else f"/api/v1/namespaces/{quote(namespace)}/{where}/{quote(name)}"
        )
        try:
            return await self.client.get(path)
        except ApiError as err:
            if err.not_found:
                return None
            raise
