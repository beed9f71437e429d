"""The EndpointSlice mirroring controller (upstream's pkg/controller/endpointslicemirroring): a Service
without a selector whose Endpoints someone wrote by hand gets EndpointSlices mirroring them (labelled
`endpointslice.kubernetes.io/managed-by: endpointslicemirroring-controller.k8s.io`), so the service
proxy and cluster DNS, which read slices only, route to those addresses as on a genuine cluster.

The slices follow the Endpoints and go when it goes, when the Service goes or gains a selector, or when
the Endpoints is labelled `endpointslice.kubernetes.io/skip-mirror: "true"` (the API server's own
`kubernetes` Endpoints is) or is a leader-election record. Invalid addresses and those beyond 1000 per
subset are reported as Warning events on the Endpoints (InvalidIPAddress, TooManyAddressesToMirror).
The decision is `mirroring_reconcile.reconcile`; like the EndpointSlice controller, it never decides
from a cache that does not show its own last writes (`SliceTracker`).
"""

from __future__ import annotations

from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.endpointslice import SLICES, SliceTracker, slices_path, write_slices
from controlplane.controllers.endpointslice_pods import MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from controlplane.controllers.mirroring_reconcile import (
    CONTROLLER_NAME,
    MAX_ENDPOINTS_PER_SUBSET,
    MirrorPlan,
    reconcile,
    should_mirror,
)
from kubeclient.errors import ApiError
from kubeclient.events import WARNING
from kubeclient.informer import meta, split_key

Obj = dict[str, Any]


def _mirrored_for(slice_: Obj) -> list[str]:
    labels = meta(slice_).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != CONTROLLER_NAME or not labels.get(SERVICE_NAME_LABEL):
        return []
    return [f"{meta(slice_).get('namespace', '')}/{labels[SERVICE_NAME_LABEL]}"]


def _selectorless(service: Obj) -> bool:
    return not (service.get("spec") or {}).get("selector")


class EndpointSliceMirroringController(Controller):
    name = "endpointslicemirroring"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.max_per_subset = int(ctx.option("mirroring_max_endpoints_per_subset", MAX_ENDPOINTS_PER_SUBSET))
        self.recorder = ctx.recorder("endpoint-slice-mirroring-controller")
        self.services = ctx.informers.get("/api/v1/services")
        self.endpoints = ctx.informers.get("/api/v1/endpoints")
        self.slices = ctx.informers.get(SLICES, indexers={"mirrored": _mirrored_for})
        self.tracker = SliceTracker()
        self.services.add_handler(
            on_add=self._service_changed,
            on_update=lambda old, new: _selectorless(old) != _selectorless(new) and self.enqueue(new),
            on_delete=self._service_changed,
        )
        self.endpoints.add_handler(
            on_add=self._endpoints_changed,
            on_update=lambda old, new: (should_mirror(old) or should_mirror(new)) and self.enqueue(new),
            on_delete=self._endpoints_changed,
        )
        self.slices.add_handler(
            on_add=self._slice_changed,
            on_update=lambda old, new: [self._slice_changed(s) for s in (old, new)],
            on_delete=self._slice_changed,
        )

    def _service_changed(self, service: Obj) -> None:
        if _selectorless(service):
            self.enqueue(service)

    def _endpoints_changed(self, endpoints: Obj) -> None:
        if should_mirror(endpoints):
            self.enqueue(endpoints)

    def _slice_changed(self, slice_: Obj) -> None:
        for key in _mirrored_for(slice_):
            self.queue.add(key)

    async def sync(self, key: str) -> None:
        endpoints = self.endpoints.get(key)
        service = self.services.get(key)
        mirrored = self.slices.by_index("mirrored", key)
        if not should_mirror(endpoints) or service is None or not _selectorless(service):
            self.tracker.forget(key)
            await self._delete_all(key, mirrored)
            return
        assert endpoints is not None
        if self.tracker.stale(key, mirrored):
            self.queue.add_after(key, SliceTracker.PATIENCE + 0.5)
            return
        plan = reconcile(endpoints, mirrored, self.max_per_subset)
        if plan.invalid:
            self.recorder.event(
                endpoints,
                WARNING,
                "InvalidIPAddress",
                f"Skipped {plan.invalid} invalid IP addresses when mirroring to EndpointSlices",
            )
        if plan.skipped > plan.invalid:
            self.recorder.event(
                endpoints,
                WARNING,
                "TooManyAddressesToMirror",
                f"A max of {self.max_per_subset} addresses can be mirrored to EndpointSlices per Endpoints "
                f"subset. {plan.skipped} addresses were skipped",
            )
        if not plan.empty:
            await self._apply(key, endpoints, plan)

    async def _delete_all(self, key: str, slices: list[Obj]) -> None:
        namespace, _ = split_key(key)
        for slice_ in slices:
            try:
                await self.client.delete(slices_path(namespace, meta(slice_)["name"]))
            except ApiError as err:
                if not err.not_found:
                    raise

    async def _apply(self, key: str, endpoints: Obj, plan: MirrorPlan) -> None:
        # No new slices for an Endpoints being deleted (upstream's finalize).
        creates = [] if meta(endpoints).get("deletionTimestamp") else plan.create
        await write_slices(self.client, self.tracker, key, creates, plan.update, plan.delete)
