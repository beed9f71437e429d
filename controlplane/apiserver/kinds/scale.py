"""The scale subresource (autoscaling/v1 Scale) of workloads: a view of spec.replicas, status.replicas
and the selector; reading and writing it goes through this one place. A kind whose selector is a plain
label map (ReplicationController) has its own instance, `Scale(map_selector)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import errors
from controlplane.apiserver.kinds.base import Subresource
from kubeclient.selectors import SelectorError, from_label_selector, from_set

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import RequestInfo, RestHandler

Obj = dict[str, Any]


def label_selector(selector: Any) -> str:
    """A metav1.LabelSelector as the Scale's status.selector text."""
    try:
        return str(from_label_selector(selector or {}))
    except SelectorError:
        return ""


def map_selector(selector: Any) -> str:
    """A map selector (labels.SelectorFromSet(...).String())."""
    return str(from_set(selector)) if isinstance(selector, dict) else ""


def scale_of(obj: Obj, selector_text: Callable[[Any], str] = label_selector) -> Obj:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    selector = selector_text(spec.get("selector"))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {"replicas": (obj.get("status") or {}).get("replicas", 0), "selector": selector},
    }


class Scale(Subresource):
    name = "scale"
    group = "autoscaling"
    kind = "Scale"
    schema = "V1Scale"

    def __init__(self, selector_text: Callable[[Any], str] = label_selector) -> None:
        self.selector_text = selector_text

    def view(self, obj: Obj) -> Obj:
        """The Scale an object shows (a custom resource's reads its CRD's paths)."""
        return scale_of(obj, self.selector_text)

    def set_replicas(self, obj: Obj, replicas: int) -> None:
        obj.setdefault("spec", {})["replicas"] = replicas

    async def get(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        cached = await rest.registry.get(info.resource, info.namespace, info.name)
        return rest.json(self.view(cached.obj))

    async def update(self, rest: RestHandler, request: web.Request, info: RequestInfo) -> web.StreamResponse:
        body, _ = await rest.decode_body(request, info, "Scale", "autoscaling/v1", self.schema)
        return await self._set(rest, request, info, lambda scale: body)

    async def patch(
        self, rest: RestHandler, request: web.Request, info: RequestInfo, apply_patch: Callable[[Obj], Obj]
    ) -> web.StreamResponse:
        def patched(scale: Obj) -> Obj:
            out = apply_patch(scale)
            rest.decode(
                rest.check_kind(out, self.kind, "autoscaling/v1"),
                self.kind,
                "autoscaling/v1",
                self.schema,
                request,
                patch=True,
            )
            return out

        return await self._set(rest, request, info, patched)

    async def _set(
        self, rest: RestHandler, request: web.Request, info: RequestInfo, change: Callable[[Obj], Obj]
    ) -> web.StreamResponse:
        def mutate(current: Obj) -> Obj:
            scale = change(self.view(current))
            rv = (scale.get("metadata") or {}).get("resourceVersion")
            if rv and rv != current["metadata"].get("resourceVersion"):
                raise errors.conflict(info.resource.plural, info.resource.group, info.name, errors.MODIFIED)
            replicas = (scale.get("spec") or {}).get("replicas", 0)
            if not isinstance(replicas, int) or replicas < 0:
                raise errors.invalid_object(
                    "Scale",
                    "autoscaling",
                    info.name,
                    [errors.invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
                )
            self.set_replicas(current, replicas)
            return current

        updated = await rest.registry.guaranteed_update(
            info.resource,
            info.namespace,
            info.name,
            mutate,
            "",
            rest.user(request),
            rest.dry_run(request),
            rest.manager(request),
        )
        return rest.json(self.view(updated))


SCALE = Scale()
