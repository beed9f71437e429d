"""Storage capacity tracking, as kubernetes-csi/external-provisioner's capacity controller
(`--enable-capacity`, pkg/capacity) does it beside a driver: the scheduler's VolumeBinding only places a
WaitForFirstConsumer claim of a driver with `storageCapacity: true` on a node some CSIStorageCapacity
says has room (controlplane/scheduler/storagecapacity.py); this loop writes those objects.

The driver's topology segments come from the CSINodes that list the driver: each node's values of the
driver's topology keys (a node missing one of those labels is left out until it has it; a driver without
topology keys has one empty segment, every node). For each StorageClass whose provisioner is the driver
(not the Immediate ones, unless `capacity_immediate_binding`) and each segment, one GetCapacity (the
class's parameters, the segment as accessible topology) feeds one CSIStorageCapacity in the driver's
namespace: generateName `csisc-`, labels `csi.storage.k8s.io/drivername` and
`csi.storage.k8s.io/managed-by: external-provisioner`, `storageClassName`, `nodeTopology` matching the
segment's labels, `capacity` and, when the driver says, `maximumVolumeSize`. No owner reference: the
loop does not run in a pod (upstream's `--capacity-ownerref-level=-1`).

Refreshed every `capacity_poll_interval` (1 min, upstream's default), at once when a class, a CSINode's
topology keys or a node's labels change, and after the provisioner made or deleted a volume (seen as the
PV appearing or going: the segments of its node affinity, else its class). A GetCapacity that fails is
logged and retried with back-off; the object is neither created nor changed meanwhile (it stays stale,
as upstream's), and other items go on. Objects of a class or segment that went, duplicates, and objects
found at start that match nothing are deleted; objects with other labels are never touched.

Tracked only when the driver reports the GET_CAPACITY controller capability and its CSIDriver asks for
capacity tracking (`storageCapacity: true`; otherwise the scheduler would not read the objects anyway).

Its gauges, under upstream's names: csistoragecapacities_desired_goal (objects that should exist),
csistoragecapacities_desired_current (those that do) and csistoragecapacities_obsolete (those that exist
and will be deleted).

Where it runs: beside the driver, as the `csi-capacity` controller of the manager that runs the
csi-provisioner (same account, as upstream runs it inside external-provisioner):
`pykubelet controller-manager --controllers csi-provisioner,csi-capacity --csi-address SOCKET`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.volume.capacityitems import (
    DRIVER_LABEL,
    ITEM,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    Item,
    affinity_segments,
    capacity_fields,
    capacity_object,
    decode,
    driver_topology_keys,
    encode,
    item_of,
    segments_of,
    tracked_class,
    up_to_date,
)
from kubeclient import volumes as vol
from kubeclient.csi.client import Capacity, CSICallError, CSIClient
from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.errors import ApiError
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]

NAMESPACE = "kube-system"
POLL_INTERVAL = 60.0
TOPOLOGY, POLL = "topology", "poll"
OBJECT, CLASS, SEGMENT = "object:", "class:", "segment:"


class _Gauges(Collector):
    """external-provisioner's capacity gauges, read from the tracker at scrape time."""

    HELP = {
        "csistoragecapacities_desired_goal": "Number of CSIStorageCapacity objects that are supposed to be "
        "managed automatically.",
        "csistoragecapacities_desired_current": "Number of CSIStorageCapacity objects that exist and are "
        "supposed to be managed automatically.",
        "csistoragecapacities_obsolete": "Number of CSIStorageCapacity objects that exist and will be deleted "
        "automatically. Objects that exist and may need an update are not considered obsolete and therefore "
        "not included in this value.",
    }

    def __init__(self, tracker: CSICapacity) -> None:
        self.tracker = tracker

    def collect(self) -> Iterator[Metric]:
        for name, value in self.tracker.counts().items():
            yield GaugeMetricFamily(name, f"[ALPHA] {self.HELP[name]}", value=value)


class CapacityQueryFailed(Exception):
    """GetCapacity failed for an item: retried with the item's back-off."""


class CSICapacity(Controller):
    name = "csi-capacity"
    account = "csi-provisioner"  # upstream runs it inside external-provisioner, on its account
    workers = 1  # upstream's --capacity-threads

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.csi = CSIClient(str(ctx.option("csi_address", "")))
        self.namespace = str(ctx.option("capacity_namespace", NAMESPACE))
        self.poll_interval = float(ctx.option("capacity_poll_interval", POLL_INTERVAL))
        self.immediate = bool(ctx.option("capacity_immediate_binding", False))
        self.collection = f"/apis/storage.k8s.io/v1/namespaces/{self.namespace}/csistoragecapacities"
        self.driver = ""  # GetPluginInfo's name, asked before the first sync
        self.supported: bool | None = None  # the GET_CAPACITY capability, asked once
        self.wanted: set[Item] = set()
        self.reconciled = False
        self.created: dict[Item, Obj] = {}  # written, not yet seen by the informer
        self.classes = ctx.informers.get("/apis/storage.k8s.io/v1/storageclasses")
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.csinodes = ctx.informers.get("/apis/storage.k8s.io/v1/csinodes")
        self.csidrivers = ctx.informers.get("/apis/storage.k8s.io/v1/csidrivers")
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.capacities = ctx.informers.get(
            self.collection, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        )
        ctx.registry.register(_Gauges(self))
        self.classes.add_handler(**self.handlers(lambda sc: CLASS + meta(sc).get("name", "")))
        self.nodes.add_handler(
            on_add=self._topology_changed,
            on_update=lambda old, new: self._labels_changed(old, new),
            on_delete=self._topology_changed,
        )
        self.csinodes.add_handler(
            on_add=self._topology_changed,
            on_update=lambda old, new: self._keys_changed(old, new),
            on_delete=self._topology_changed,
        )
        self.csidrivers.add_handler(**self.handlers(lambda d: TOPOLOGY))
        self.volumes.add_handler(on_add=self._volume_made, on_delete=self._volume_gone)
        self.capacities.add_handler(
            on_add=self._object_changed,
            on_update=lambda _old, new: self._object_changed(new),
            on_delete=self._object_gone,
        )

    # --- what wakes it -------------------------------------------------------------------------------

    def _topology_changed(self, _obj: Obj) -> None:
        self.queue.add(TOPOLOGY)

    def _labels_changed(self, old: Obj, new: Obj) -> None:
        if meta(old).get("labels") != meta(new).get("labels"):
            self.queue.add(TOPOLOGY)

    def _keys_changed(self, old: Obj, new: Obj) -> None:
        if not self.driver or driver_topology_keys(old, self.driver) != driver_topology_keys(
            new, self.driver
        ):
            self.queue.add(TOPOLOGY)

    def _ours(self, volume: Obj) -> bool:
        return bool(self.driver) and vol.annotations(volume).get(vol.PROVISIONED_BY) == self.driver

    def _volume_made(self, volume: Obj) -> None:
        """After CreateVolume: the segments the volume went to, else its class (upstream's wrapper
        around Provision)."""
        if not self._ours(volume):
            return
        segments = affinity_segments(volume)
        for segment in segments:
            self.queue.add(SEGMENT + encode(segment))
        if not segments and vol.volume_class(volume):
            self.queue.add(CLASS + vol.volume_class(volume))

    def _volume_gone(self, volume: Obj) -> None:
        """After DeleteVolume (the provisioner deletes the PV once the volume is gone)."""
        if self._ours(volume):
            for segment in affinity_segments(volume):
                self.queue.add(SEGMENT + encode(segment))

    def _object_changed(self, capacity: Obj) -> None:
        self.queue.add(OBJECT + meta(capacity).get("name", ""))

    def _object_gone(self, capacity: Obj) -> None:
        item = item_of(capacity)
        if item is not None:
            self.queue.add(item.key)  # made again if still wanted

    # --- running -------------------------------------------------------------------------------------

    async def run(self, stop) -> None:  # type: ignore[no-untyped-def]
        self.queue.add(TOPOLOGY)
        self.queue.add_after(POLL, self.poll_interval)
        try:
            await super().run(stop)
        finally:
            await self.csi.close()

    async def _ready(self) -> bool:
        if not self.driver:
            self.driver = await self.csi.plugin_name()
        if self.supported is None:
            caps = await self.csi.controller_capabilities()
            self.supported = pb.ControllerServiceCapability.RPC.GET_CAPACITY in caps
            if not self.supported:
                log.error(
                    "driver=%s does not report the GET_CAPACITY controller capability: no storage "
                    "capacity is tracked",
                    self.driver,
                )
        return self.supported

    async def sync(self, key: str) -> None:
        if key == POLL:
            try:
                await self._poll()
            finally:
                self.queue.add_after(POLL, self.poll_interval)
            return
        if not await self._ready():
            return
        if key == TOPOLOGY or key.startswith(CLASS) or not self.reconciled:
            self._reconcile()
        if key.startswith(CLASS):
            name = key[len(CLASS) :]
            self._refresh(lambda item: item.class_name == name)
        elif key.startswith(SEGMENT):
            segment = decode(key[len(SEGMENT) :])
            self._refresh(lambda item: item.segment == segment)
        elif key.startswith(ITEM):
            await self._sync_item(Item.parse(key[len(ITEM) :]))
        elif key.startswith(OBJECT):
            await self._sync_object(key[len(OBJECT) :])

    async def _poll(self) -> None:
        """Every item again: the driver's figures change without any event (upstream's pollCapacities)."""
        if not await self._ready():
            return
        if not self.reconciled:
            self._reconcile()
        self._refresh(lambda item: True)

    def _refresh(self, which: Callable[[Item], bool]) -> None:
        for item in self.wanted:
            if which(item):
                self.queue.add(item.key)

    def _tracking(self) -> bool:
        driver = self.csidrivers.get(self.driver)
        return bool(driver and (driver.get("spec") or {}).get("storageCapacity") is True)

    def _reconcile(self) -> None:
        """Which objects should exist now: new items get their first GetCapacity, objects that match no
        item any more are deleted."""
        self.reconciled = True
        segments = segments_of(self.driver, self.csinodes.list(), self.nodes.get)
        tracking = self._tracking()
        classes = [
            meta(sc).get("name", "")
            for sc in self.classes.list()
            if tracking and tracked_class(sc, self.driver, self.immediate)
        ]
        wanted = {Item(c, s) for c in classes for s in segments}
        if wanted != self.wanted:
            log.info(
                "capacity items driver=%s classes=%d segments=%d items=%d",
                self.driver,
                len(classes),
                len(segments),
                len(wanted),
            )
        for item in wanted - self.wanted:
            self.queue.add(item.key)
        self.wanted = wanted
        for capacity in self._managed():
            if item_of(capacity) not in wanted:
                self.queue.add(OBJECT + meta(capacity).get("name", ""))

    def counts(self) -> dict[str, int]:
        """The objects that should exist, those of them that do, and those that exist and will go."""
        managed = self._managed()
        present = {item_of(c) for c in managed} | set(self.created)
        return {
            "csistoragecapacities_desired_goal": len(self.wanted),
            "csistoragecapacities_desired_current": len(self.wanted & present),
            "csistoragecapacities_obsolete": sum(1 for c in managed if item_of(c) not in self.wanted),
        }

    # --- the objects ---------------------------------------------------------------------------------

    def _managed(self) -> list[Obj]:
        return [
            c
            for c in self.capacities.list()
            if (meta(c).get("labels") or {}).get(DRIVER_LABEL) == self.driver
            and (meta(c).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]

    def _objects(self, item: Item) -> list[Obj]:
        """The item's objects, oldest first (the first is kept, the others are duplicates); the one just
        created stands in until the informer brings it."""
        found = sorted(
            (c for c in self._managed() if item_of(c) == item),
            key=lambda c: (meta(c).get("creationTimestamp", ""), meta(c).get("name", "")),
        )
        if found:
            self.created.pop(item, None)
            return found
        return [self.created[item]] if item in self.created else []

    async def _sync_item(self, item: Item) -> None:
        objects = self._objects(item)
        sc = self.classes.get(item.class_name)
        if item not in self.wanted or sc is None:
            for capacity in objects:
                await self._delete(capacity)
            return
        try:
            got = await self.csi.get_capacity(sc.get("parameters") or {}, dict(item.segment))
        except CSICallError as err:
            log.error("CSI GetCapacity for %s: %s", item, err)
            raise CapacityQueryFailed(f"CSI GetCapacity for {item}: {err}") from None
        if not objects:
            created = await self.client.create(
                self.collection, capacity_object(item, self.driver, self.namespace, got)
            )
            self.created[item] = created
            log.info(
                "created CSIStorageCapacity=%s item=%s capacity=%d",
                meta(created).get("name"),
                item,
                got.available,
            )
            return
        kept, *duplicates = objects
        if not up_to_date(kept, got):
            await self._update(item, kept, got)
        for capacity in duplicates:
            await self._delete(capacity)

    async def _update(self, item: Item, capacity: Obj, got: Capacity) -> None:
        body = {k: v for k, v in capacity.items() if k not in ("capacity", "maximumVolumeSize")}
        name = meta(capacity).get("name", "")
        try:
            updated = await self.client.replace(f"{self.collection}/{name}", {**body, **capacity_fields(got)})
        except ApiError as err:
            if err.not_found:
                self.created.pop(item, None)  # gone before the informer saw it: made again on retry
            raise
        if item in self.created:
            self.created[item] = updated

    async def _delete(self, capacity: Obj) -> None:
        name = meta(capacity).get("name", "")
        try:
            await self.client.delete(f"{self.collection}/{name}")
        except ApiError as err:
            if not err.not_found:
                raise
        self.created = {i: c for i, c in self.created.items() if meta(c).get("name") != name}
        log.info("deleted CSIStorageCapacity=%s", name)

    async def _sync_object(self, name: str) -> None:
        """An object the informer brought: deleted when it matches no wanted item; its item re-synced
        when it has a duplicate."""
        capacity = self.capacities.get(f"{self.namespace}/{name}")
        if capacity is None or capacity not in self._managed():
            return
        item = item_of(capacity)
        if item is None or item not in self.wanted:
            await self._delete(capacity)
        elif len(self._objects(item)) > 1:
            self.queue.add(item.key)
