"""Creating and deleting a controller's pods, with upstream's events (RealPodControl).

A pod made from a template gets the template's labels, annotations and finalizers, `generateName:
<owner>-` and a controller ownerReference (blockOwnerDeletion, so foreground deletion of the owner waits
for it). Each create or delete is an event on the owner: SuccessfulCreate `Created pod: <name>`,
FailedCreate `Error creating: <the server's message>`, SuccessfulDelete `Deleted pod: <name>`,
FailedDelete `Error deleting: ...`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING, EventRecorder
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]


def controller_ref(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_from_template(template: Obj, owner: Obj, generate_name: str | None = None) -> Obj:
    """upstream's GetPodFromTemplate: the template's metadata parts and spec, owned by `owner`."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {
        "generateName": generate_name if generate_name is not None else f"{owner['metadata']['name']}-",
        "namespace": owner["metadata"].get("namespace", ""),
        "ownerReferences": [controller_ref(owner)],
    }
    for field in ("labels", "annotations", "finalizers"):
        if tmeta.get(field):
            meta[field] = deep_copy(tmeta[field])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": deep_copy(template.get("spec") or {}),
    }


class PodControl:
    def __init__(self, client: KubeClient, recorder: EventRecorder) -> None:
        self.client = client
        self.recorder = recorder

    async def create(self, owner: Obj, pod: Obj) -> Obj:
        ns = pod["metadata"]["namespace"]
        try:
            created = await self.client.create(f"/api/v1/namespaces/{quote(ns)}/pods", pod)
        except ApiError as err:
            # A namespace being deleted refuses new pods; upstream does not report that as a failure.
            if not (err.forbidden and "being terminated" in err.message):
                self.recorder.event(owner, WARNING, "FailedCreate", f"Error creating: {err.message or err}")
            raise
        self.recorder.event(owner, NORMAL, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return created

    async def delete(self, owner: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"
        try:
            await self.client.delete(path, {"preconditions": {"uid": meta["uid"]}})
        except ApiError as err:
            if err.not_found:
                raise
            self.recorder.event(owner, WARNING, "FailedDelete", f"Error deleting: {err.message or err}")
            raise
        self.recorder.event(owner, NORMAL, "SuccessfulDelete", f"Deleted pod: {meta['name']}")
