"""core/v1 Binding: how a scheduler assigns a pod to a node, posted to pods/{name}/binding or to the
`bindings` collection (a create-only kind that is never stored). Both land here: the pod gets
spec.nodeName and a PodScheduled condition, or the request a 409 as upstream answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Kind, Subresource
from controlplane.apiserver.kinds.ports import AdmissionRequest
from controlplane.apiserver.meta import timestamp

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]
SCHEMA = "V1Binding"
_SUCCESS = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


async def bind(
    rest: RestHandler, request: web.Request, info: RequestInfo, pods: Kind, subresource: str
) -> web.StreamResponse:
    """`info.resource` and `subresource` name what admission sees, as upstream's attributes do: pods
    subresource binding for pods/{name}/binding, the `bindings` resource for the collection."""
    body, _ = await rest.decode_body(request, info, "Binding", "v1", SCHEMA)
    body.setdefault("metadata", {})  # as the decoded Go object has it, for webhooks to patch
    dry_run = rest.dry_run(request)
    pod_name = info.name or (body.get("metadata") or {}).get("name", "")
    # Admission judges a CREATE of the Binding (no old object), never an update of the pod: mutating
    # webhooks may change the Binding (its annotations then land on the pod), validating ones and
    # policies on pods/binding CREATE may refuse it; the pod's own write below is admitted by nobody.
    admission = AdmissionRequest(
        "CREATE",
        info.resource,
        subresource,
        info.namespace,
        pod_name,
        body,
        None,
        rest.user(request),
        rest.registry,
        dry_run,
    )
    await rest.registry.admission.admit(admission)
    meta = body.get("metadata") or {}
    node = (body.get("target") or {}).get("name")
    if not node:
        raise errors.invalid_object("Binding", "", pod_name, [errors.required("target.name")])
    await rest.registry.admission.validate(admission)
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
    # judged the Binding above; the pod is neither admitted nor validated again, nor given a
    # managedFields entry (the field manager works on the Binding, which is never stored).
    await rest.registry.guaranteed_update(
        pods, info.namespace, pod_name, mutate, "binding", None, dry_run, None, validate=False, admit=False
    )
    return rest.json(_SUCCESS, 201)


class BindingSubresource(Subresource):
    """pods/{name}/binding."""

    name = "binding"
    kind = "Binding"
    verbs = ("create",)
    schema = SCHEMA

    async def create(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        return await bind(rest, request, info, info.resource, self.name)


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

        return await bind(rest, request, info, POD, "")


BINDING = BindingSubresource()
KIND = Binding()
