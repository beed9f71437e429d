"""The storage-object-in-use protection controllers (upstream's pkg/controller/volume/pvcprotection and
pvprotection). Admission gives every claim `kubernetes.io/pvc-protection` and every volume
`kubernetes.io/pv-protection`; these loops take the finalizer off a claim being deleted once no scheduled
pod names it (the cache first, then a live list of the namespace's pods, as upstream asks the API server
before it lets go), and off a volume being deleted once it is not Bound.
"""

from __future__ import annotations

import copy
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, meta, split_key

Obj = dict[str, Any]
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"


def uses_claim(pod: Obj, claim_name: str) -> bool:
    """podUsesPVC: a scheduled pod naming the claim (the kubelet will not start a pod whose claim is
    being deleted, so an unscheduled one does not hold it)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and claim_name in vol.claim_names(pod)


def _without(obj: Obj, finalizer: str) -> Obj | None:
    finalizers = meta(obj).get("finalizers") or []
    if finalizer not in finalizers:
        return None
    out = copy.deepcopy(obj)
    out["metadata"]["finalizers"] = [f for f in finalizers if f != finalizer]
    return out


class PVCProtectionController(Controller):
    name = "pvc-protection"
    account = "pvc-protection-controller"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.claims = ctx.informers.get(
            "/api/v1/persistentvolumeclaims", indexers={"namespace": by_namespace}
        )
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.claims.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))
        self.pods.add_handler(on_update=lambda _o, p: self._pod_changed(p), on_delete=self._pod_changed)

    def _pod_changed(self, pod: Obj) -> None:
        namespace = meta(pod).get("namespace", "")
        for name in vol.claim_names(pod):
            self.queue.add(f"{namespace}/{name}")

    async def sync(self, key: str) -> None:
        claim = self.claims.get(key)
        if claim is None or not meta(claim).get("deletionTimestamp"):
            return
        released = _without(claim, PVC_PROTECTION)
        if released is None:
            return
        namespace, name = split_key(key)
        if any(uses_claim(p, name) for p in self.pods.by_index("namespace", namespace)):
            return
        pods, _ = await self.client.list(f"/api/v1/namespaces/{namespace}/pods")
        if any(uses_claim(p, name) for p in pods):
            return
        try:
            await self.client.replace(vol.claim_path(namespace, name), released)
        except ApiError as err:
            if not err.not_found:
                raise


class PVProtectionController(Controller):
    name = "pv-protection"
    account = "pv-protection-controller"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.volumes.add_handler(on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n))

    async def sync(self, key: str) -> None:
        volume = self.volumes.get(key)
        if volume is None or not meta(volume).get("deletionTimestamp"):
            return
        if (volume.get("status") or {}).get("phase") == "Bound":
            return
        released = _without(volume, PV_PROTECTION)
        if released is None:
            return
        try:
            await self.client.replace(vol.volume_path(key), released)
        except ApiError as err:
            if not err.not_found:
                raise
