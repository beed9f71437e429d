"""The scale subresource (autoscaling/v1 Scale) of workloads: a view of spec.replicas, status.replicas
and the selector; reading and writing it goes through this one place."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Subresource
from kubeclient.selectors import SelectorError, from_label_selector

if TYPE_CHECKING:
    from controlplane.apiserver.handlers import RestHandler
    from controlplane.apiserver.request import RequestInfo

Obj = dict[str, Any]


def scale_of(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    try:
        selector = str(from_label_selector(spec.get("selector") or {}))
    except SelectorError:
        selector = ""
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta},
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": selector},
    }


class Scale(Subresource):
    name = "scale"
    group = "autoscaling"
    kind = "Scale"
    schema = "V1Scale"

    async def get(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        cached = await rest.registry.get(info.resource, info.namespace, info.name)
        return rest.json(scale_of(cached.obj))

    async def update(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        body, _ = await rest.decode_body(request, info, "Scale", "autoscaling/v1", self.schema)
        return await self._set(rest, request, info, lambda scale: body)

    async def patch(self, rest: RestHandler, request: web.Request, info: RequestInfo, apply_patch: Callable[[Obj], Obj]) -> web.StreamResponse:
        def patched(scale: Obj) -> Obj:
            out = apply_patch(scale)
            rest.decode(rest.check_kind(out, self.kind, "autoscaling/v1"), self.kind, "autoscaling/v1", self.schema, request, patch=True)
            return out

        return await self._set(rest, request, info, patched)

    async def _set(self, rest: RestHandler, request: web.Request, info: RequestInfo, change: Callable[[Obj], Obj]) -> web.StreamResponse:
        def mutate(current: Obj) -> Obj:
            scale = change(scale_of(current))
            rv = (scale.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(info.resource.plural, info.resource.group, info.name, errors.MODIFIED)
            replicas = (scale.get("spec") or {}).get("replicas", 0)
            if replicas < 0:
                raise errors.invalid_object("Scale", "autoscaling", info.name, [
                    errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")])
            current.setdefault("spec", {})["replicas"] = replicas
            return current

        updated = await rest.registry.guaranteed_update(
            info.resource, info.namespace, info.name, mutate, "", rest.user(request), rest.dry_run(request),
            rest.manager(request),
        )
        return rest.json(scale_of(updated))


SCALE = Scale()
