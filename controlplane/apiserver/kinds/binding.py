"""core/v1 Binding: how a scheduler assigns a pod to a node, posted to pods/{name}/binding or to the
`bindings` collection (a create-only kind that is never stored). Both land here: the pod gets
spec.nodeName and a PodScheduled condition, or the request a 409 as upstream answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Kind, Subresource
from controlplane.apiserver.meta import timestamp

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]
SCHEMA = "V1Binding"
_SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def bind(rest: RestHandler, request: web.Request, info: RequestInfo, pods: Kind) -> web.StreamResponse:
    body, _ = await rest.decode_body(request, info, "Binding", "v1", SCHEMA)
    meta = body.get("metadata") or {}
    pod_name = info.name or meta.get("name", "")
    node = (body.get("target") or {}).get("name")
    if not node:
        raise errors.invalid_object("Binding", "", pod_name, [errors.required("target.name")])
    # A uid in the Binding's metadata is a precondition, as upstream: a scheduler that decided for a pod
    # which has since been deleted and recreated under the same name must not bind the new one.
    want_uid = meta.get("uid")
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}

    def mutate(pod: Obj) -> Obj:
        spec = pod.setdefault("spec", {})
        have_uid = pod["metadata"].get("uid")
        if want_uid and want_uid != have_uid:
            raise errors.conflict(
                "pods/binding",
                "",
                pod_name,
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {have_uid}",
            )
        if spec.get("nodeName"):
            raise errors.conflict(
                "pods/binding",
                "",
                pod_name,
                f'pod {pod_name} is already assigned to node "{spec["nodeName"]}"',
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(
                "pods/binding", "", pod_name, f"pod {pod_name} is being deleted, cannot be assigned to a host"
            )
        spec["nodeName"] = node
        if annotations:  # upstream's setPodHostAndAnnotations merges the Binding's into the pod's
            pod["metadata"]["annotations"] = {**(pod["metadata"].get("annotations") or {}), **annotations}
        conditions = pod.setdefault("status", {}).setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": timestamp(),
            }
        )
        return pod

    # As upstream's BindingREST, a conditional write of the stored pod below the strategy: admission
    # judges the request, but the pod is neither validated again nor given a managedFields entry (the
    # field manager works on the Binding, which is never stored).
    await rest.registry.guaranteed_update(
        pods, info.namespace, pod_name, mutate, "binding", rest.user(request), False, None, validate=False
    )
    return rest.json(_SUCCESS, 201)


class BindingSubresource(Subresource):
    """pods/{name}/binding."""

    name = "binding"
    kind = "Binding"
    verbs = ("create",)
    schema = SCHEMA

    async def create(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        return await bind(rest, request, info, info.resource)


class Binding(Kind):
    kind = "Binding"
    plural = "bindings"
    verbs = ("create",)
    stored = False
    schema = SCHEMA

    async def create_virtual(
        self, rest: RestHandler, request: web.Request, info: RequestInfo
    ) -> web.StreamResponse:
        from controlplane.apiserver.kinds.pod import KIND as POD

        return await bind(rest, request, info, POD)


BINDING = BindingSubresource()
KIND = Binding()
