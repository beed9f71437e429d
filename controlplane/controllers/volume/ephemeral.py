"""The ephemeral volume controller, as upstream's (pkg/controller/volume/ephemeral): each generic
ephemeral volume of a pod gets its claim `<pod>-<volume>` made from the volume's template (its labels,
annotations and spec), owned by the pod as controller with blockOwnerDeletion, so the claim goes with the
pod through the garbage collector. A claim of that name that the pod does not own is left alone and
reported (upstream's error text); a pod being deleted gets no new claim."""

from __future__ import annotations

import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.errors import ApiError
from kubeclient.events import WARNING
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]


def claim_for(pod: Obj, volume: Obj) -> Obj:
    template = (volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}
    tmeta = template.get("metadata") or {}
    m = meta(pod)
    claim_meta: Obj = {
        "name": vol.ephemeral_claim_name(pod, volume),
        "namespace": m.get("namespace", ""),
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": m.get("name", ""),
                "uid": m.get("uid", ""),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    for field in ("labels", "annotations"):
        if tmeta.get(field):
            claim_meta[field] = dict(tmeta[field])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": claim_meta,
        "spec": dict(template.get("spec") or {}),
    }


class EphemeralVolumeController(Controller):
    name = "ephemeral-volume"
    account = "ephemeral-volume-controller"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.recorder = ctx.recorder("ephemeral_volume")
        self.pods = ctx.informers.get("/api/v1/pods")
        self.claims = ctx.informers.get("/api/v1/persistentvolumeclaims")
        self.pods.add_handler(on_add=self._pod, on_update=lambda _o, n: self._pod(n))
        # a claim of a pod going away (deleted by hand): make it again for the pod
        self.claims.add_handler(on_delete=self._claim_gone)

    def _pod(self, pod: Obj) -> None:
        if any(isinstance(v.get("ephemeral"), dict) for v in (pod.get("spec") or {}).get("volumes") or []):
            self.enqueue(pod)

    def _claim_gone(self, claim: Obj) -> None:
        for ref in meta(claim).get("ownerReferences") or []:
            if ref.get("kind") == "Pod" and ref.get("controller"):
                self.queue.add(f"{meta(claim).get('namespace')}/{ref.get('name')}")

    async def sync(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or meta(pod).get("deletionTimestamp"):
            return
        namespace = meta(pod).get("namespace", "")
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            if not isinstance(volume.get("ephemeral"), dict):
                continue
            name = vol.ephemeral_claim_name(pod, volume)
            existing = self.claims.get(f"{namespace}/{name}")
            if existing is not None:
                owned = any(
                    r.get("controller") and r.get("uid") == meta(pod).get("uid")
                    for r in meta(existing).get("ownerReferences") or []
                )
                if not owned:
                    self.recorder.event(
                        pod,
                        WARNING,
                        "FailedBinding",
                        f"PVC {namespace}/{name} was not created for pod {namespace}/{meta(pod).get('name')} "
                        "(pod is not owner)",
                    )
                continue
            try:
                await self.client.create(
                    f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim_for(pod, volume)
                )
            except ApiError as err:
                if not err.already_exists:
                    self.recorder.event(pod, WARNING, "FailedBinding", f"create PVC {name}: {err.message}")
                    raise
            log.info("ephemeral claim made pod=%s claim=%s", key, name)
