"""The EndpointSlice controller (upstream's pkg/controller/endpointslice): every Service with a
selector gets a family of EndpointSlices (labels kubernetes.io/service-name and
endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io, owned by the Service) listing
the pods it selects, at most `max_endpoints_per_slice` (100) per slice.

A sync reads the Service, its pods, the nodes and its managed slices from the caches and writes what
`endpointslice_reconcile.reconcile` decides. Slices written by anyone else (a Service without a
selector, a user's own) are never touched. Before deciding, the cache must show every slice this
controller last wrote (the tracker): deciding from a stale cache would create duplicates.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import quote

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.endpointslice_pods import (
    CONTROLLER_NAME,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    ServiceInfo,
    selected_pods,
)
from controlplane.controllers.endpointslice_reconcile import (
    MAX_ENDPOINTS_PER_SLICE,
    ZONE_LABEL,
    Plan,
    reconcile,
)
from controlplane.controllers.triggertime import TriggerTimeTracker, annotate
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, meta, split_key

Obj = dict[str, Any]
SLICES = "/apis/discovery.k8s.io/v1/endpointslices"


def _service_of_slice(slice_: Obj) -> str | None:
    labels = meta(slice_).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != CONTROLLER_NAME or not labels.get(SERVICE_NAME_LABEL):
        return None
    return f"{meta(slice_).get('namespace', '')}/{labels[SERVICE_NAME_LABEL]}"


def by_service(slice_: Obj) -> list[str]:
    key = _service_of_slice(slice_)
    return [key] if key else []


def slices_path(namespace: str, name: str = "") -> str:
    base = f"/apis/discovery.k8s.io/v1/namespaces/{quote(namespace)}/endpointslices"
    return f"{base}/{quote(name)}" if name else base


class SliceTracker:
    """The writes of this controller, per Service, that the cache may not show yet (upstream's
    endpointSliceTracker): slice name -> the resourceVersion written, or None for a deletion. The cache
    is stale for a Service while a slice written is missing or older there, or a slice deleted is still
    there; judged from the cache's contents at sync time, never from the order in which the write's
    answer and its watch event arrive."""

    # A write the cache never shows (a relist that skipped it) stops counting after this long.
    PATIENCE = 10.0

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, int | None]] = {}
        self._since: dict[str, float] = {}

    def wrote(self, service: str, name: str, rv: str | None) -> None:
        self._pending.setdefault(service, {})[name] = int(rv) if rv else None
        self._since.setdefault(service, time.monotonic())

    def stale(self, service: str, cached: list[Obj]) -> bool:
        """Whether `cached` (the cache's slices of the Service) misses a write; caught-up ones are dropped."""
        pending = self._pending.get(service)
        if pending:
            versions = {meta(s).get("name", ""): int(meta(s).get("resourceVersion") or 0) for s in cached}
            for name, wanted in list(pending.items()):
                have = versions.get(name)
                if (have is None) if wanted is None else (have is not None and have >= wanted):
                    del pending[name]
        if not pending:
            self.forget(service)
            return False
        if time.monotonic() - self._since.get(service, 0.0) > self.PATIENCE:
            self.forget(service)
            return False
        return True

    def forget(self, service: str) -> None:
        self._pending.pop(service, None)
        self._since.pop(service, None)


async def write_slices(
    client: KubeClient,
    tracker: SliceTracker,
    key: str,
    create: list[Obj],
    update: list[Obj],
    delete: list[Obj],
) -> None:
    """Write a plan's slices for the Service (or Endpoints) `key`, each write recorded in `tracker`:
    creates and updates first, so a client never sees the Service without endpoints mid-way; a
    namespace being terminated refuses creates, which then wait for nothing."""
    namespace, _ = split_key(key)

    async def created(body: Obj) -> None:
        try:
            made = await client.create(slices_path(namespace), body)
        except ApiError as err:
            if err.forbidden and "being terminated" in err.message:
                return
            raise
        tracker.wrote(key, meta(made)["name"], meta(made).get("resourceVersion"))

    async def updated(body: Obj) -> None:
        made = await client.replace(slices_path(namespace, meta(body)["name"]), body)
        tracker.wrote(key, meta(made)["name"], meta(made).get("resourceVersion"))

    async def deleted(body: Obj) -> None:
        name = meta(body)["name"]
        try:
            await client.delete(slices_path(namespace, name))
        except ApiError as err:
            if not err.not_found:
                raise
        tracker.wrote(key, name, None)

    results = await asyncio.gather(
        *(created(b) for b in create), *(updated(b) for b in update), return_exceptions=True
    )
    results += await asyncio.gather(*(deleted(b) for b in delete), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


class EndpointSliceController(Controller):
    name = "endpointslice"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.max_per_slice = int(ctx.option("max_endpoints_per_slice", MAX_ENDPOINTS_PER_SLICE))
        self.services = ctx.informers.get("/api/v1/services", indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"namespace": by_namespace})
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.slices = ctx.informers.get(SLICES, indexers={"service": by_service})
        self.tracker = SliceTracker()
        self.trigger_times = TriggerTimeTracker()
        self.services.add_handler(**self.handlers())
        self.pods.add_handler(
            on_add=self._pod_changed, on_update=self._pod_updated, on_delete=self._pod_changed
        )
        self.slices.add_handler(
            on_add=self._slice_changed,
            on_update=lambda _o, n: self._slice_changed(n),
            on_delete=self._slice_changed,
        )
        self.nodes.add_handler(on_add=self._node_changed, on_delete=self._node_changed)

    # --- events --------------------------------------------------------------------------------------

    def _services_selecting(self, pod: Obj) -> list[str]:
        labels = meta(pod).get("labels") or {}
        keys = []
        for service in self.services.by_index("namespace", meta(pod).get("namespace", "")):
            info = ServiceInfo.of(service)
            if info.selector is not None and info.pod_selector().matches(labels):
                keys.append(info.key)
        return keys

    def _pod_changed(self, pod: Obj) -> None:
        for key in self._services_selecting(pod):
            self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        for key in {*self._services_selecting(old), *self._services_selecting(new)}:
            self.queue.add(key)

    def _slice_changed(self, slice_: Obj) -> None:
        key = _service_of_slice(slice_)
        if key:
            self.queue.add(key)

    def _node_changed(self, node: Obj) -> None:
        # Pods left out while their node was unknown come in now (rare: nodes join and leave).
        name = meta(node).get("name")
        wanted = set()
        for pod in self.pods.list():
            if (pod.get("spec") or {}).get("nodeName") == name:
                wanted.update(self._services_selecting(pod))
        for key in wanted:
            self.queue.add(key)

    def _zone_of(self, name: str) -> tuple[bool, str | None]:
        node = self.nodes.get(name)
        if node is None:
            return False, None
        return True, (meta(node).get("labels") or {}).get(ZONE_LABEL)

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        service = self.services.get(key)
        if service is None:
            self.tracker.forget(key)
            self.trigger_times.forget(key)
            return  # its slices go with it (ownerReferences: the garbage collector)
        info = ServiceInfo.of(service)
        if info.external_name or info.selector is None:
            return  # no endpoints from this controller; a user may write slices of their own
        cached = self.slices.by_index("service", key)
        existing = [
            s
            for s in cached
            if any(r.get("uid") == info.uid for r in meta(s).get("ownerReferences") or [])
            or not meta(s).get("ownerReferences")
        ]
        if self.tracker.stale(key, cached):
            # The pending slice events enqueue the Service again; look once more in case they never come.
            self.queue.add_after(key, SliceTracker.PATIENCE + 0.5)
            return
        namespace, _ = split_key(key)
        pods = selected_pods(info, self.pods.by_index("namespace", namespace))
        trigger = self.trigger_times.compute(key, service, pods)
        plan = reconcile(info, pods, existing, self._zone_of, self.max_per_slice)
        plan.create = [annotate(s, trigger) for s in plan.create]
        plan.update = [annotate(s, trigger) for s in plan.update]
        if not plan.empty:
            await self._apply(key, plan)
        if plan.skipped:
            raise RuntimeError("; ".join(plan.skipped))

    async def _apply(self, key: str, plan: Plan) -> None:
        await write_slices(self.client, self.tracker, key, plan.create, plan.update, plan.delete)
