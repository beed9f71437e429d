"""The root CA publisher: a ConfigMap `kube-root-ca.crt` with the cluster CA (`ca.crt`) in every
namespace, put back if deleted or changed (upstream's pkg/controller/certificates/rootcacertpublisher).
Workloads verify the API server with it; the projected service-account volume mounts it.
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.errors import ApiError
from kubeclient.informer import meta

NAME = "kube-root-ca.crt"
DESCRIPTION_KEY = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such "
    "as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions "
    "of Kubernetes clusters."
)


class RootCAPublisher(Controller):
    name = "root-ca-cert-publisher"
    account = "root-ca-cert-publisher"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        ca = ctx.option("root_ca", b"")
        self.ca = ca.decode() if isinstance(ca, bytes) else str(ca)
        self.namespaces = ctx.informers.get("/api/v1/namespaces")
        self.configmaps = ctx.informers.get("/api/v1/configmaps", field_selector=f"metadata.name={NAME}")
        self.namespaces.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))
        by_ns: dict[str, Any] = self.handlers(key=lambda cm: str(meta(cm).get("namespace", "")))
        self.configmaps.add_handler(**by_ns)

    def _wanted(self, namespace: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": namespace, "annotations": {DESCRIPTION_KEY: DESCRIPTION}},
            "data": {"ca.crt": self.ca},
        }

    async def sync(self, key: str) -> None:
        if not self.ca:
            return
        ns = self.namespaces.get(key)
        if ns is None or meta(ns).get("deletionTimestamp"):
            return
        current = self.configmaps.get(f"{key}/{NAME}")
        path = f"/api/v1/namespaces/{key}/configmaps"
        try:
            if current is None:
                await self.client.create(path, self._wanted(key))
                return
            annotations = meta(current).get("annotations") or {}
            if (current.get("data") or {}) == {"ca.crt": self.ca} and annotations.get(
                DESCRIPTION_KEY
            ) == DESCRIPTION:
                return
            updated = dict(current)
            updated["data"] = {"ca.crt": self.ca}
            updated["metadata"] = {
                **meta(current),
                "annotations": {**annotations, DESCRIPTION_KEY: DESCRIPTION},
            }
            await self.client.replace(f"{path}/{NAME}", updated)
        except ApiError as err:
            if not (err.already_exists or err.forbidden or err.not_found):
                raise
