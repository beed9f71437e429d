"""The CSI external resizer, as kubernetes-csi/external-resizer does it beside a driver (with 1.32's
RecoverVolumeExpansionFailure, on by default): a bound claim of this driver's volume whose requested
storage is above its status capacity is marked `Resizing` with allocatedResources at the new size and
allocatedResourceStatuses `ControllerResizeInProgress` (event `Resizing`), ControllerExpandVolume grows
the volume (a driver without the controller EXPAND_VOLUME capability leaves it all to the node), the
PersistentVolume's capacity takes the new size, then either the node is asked to finish
(`FileSystemResizePending`, `NodeResizePending`, event `FileSystemResizeRequired`; the kubelet's
NodeExpandVolume sets the claim's capacity) or the claim's capacity is set here (event
`VolumeResizeSuccessful`). A failed call is a `VolumeResizeFailed` warning and is tried again with the
queue's back-off; an infeasible size (INVALID_ARGUMENT, OUT_OF_RANGE) is `ControllerResizeInfeasible`.

It runs where the provisioner runs (csiprovisioner.py): a controller of a manager beside the driver.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient import volumes as vol
from kubeclient.csi.client import ACCESS_MODES, CSICallError, CSIClient, capability
from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.csi.resize import (
    CONTROLLER_IN_PROGRESS,
    CONTROLLER_INFEASIBLE,
    FS_PENDING,
    FS_PENDING_MESSAGE,
    NODE_IN_PROGRESS,
    NODE_INFEASIBLE,
    NODE_PENDING,
    RESIZING,
    binary,
    condition,
    merge_conditions,
    resize_status,
)
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
EXPAND = pb.ControllerServiceCapability.RPC.EXPAND_VOLUME
INFEASIBLE_CODES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)


def _status(claim: Obj) -> Obj:
    return claim.get("status") or {}


def target_size(claim: Obj, pv: Obj) -> int | None:
    """The size to expand the volume to now, as upstream's expandAndRecover decides from the claim's
    resize status; None when there is nothing for the controller to do."""
    spec_size = vol.requested_bytes(claim)
    if spec_size <= vol.storage_bytes((_status(claim).get("capacity") or {}).get("storage")):
        return None
    pv_size = vol.capacity_bytes(pv)
    status = resize_status(claim)
    allocated_text = (_status(claim).get("allocatedResources") or {}).get("storage")
    allocated = vol.storage_bytes(allocated_text) if allocated_text else None
    if pv_size < spec_size:
        if status in (NODE_PENDING, NODE_IN_PROGRESS, NODE_INFEASIBLE, CONTROLLER_IN_PROGRESS):
            size = allocated if allocated is not None else spec_size
            if status in (NODE_PENDING, NODE_IN_PROGRESS) and pv_size >= size:
                return None  # the node finishes the previous expansion first
            return size
        return spec_size
    if status in (NODE_PENDING, NODE_IN_PROGRESS):
        return None  # the node's part is pending
    if status in (CONTROLLER_IN_PROGRESS, CONTROLLER_INFEASIBLE, NODE_INFEASIBLE) or (
        not status and allocated is not None
    ):
        return allocated if allocated is not None else spec_size
    if any(c.get("type") == FS_PENDING for c in _status(claim).get("conditions") or []):
        return None
    return spec_size


class CSIResizer(Controller):
    name = "csi-resizer"
    account = "csi-resizer"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.csi = CSIClient(str(ctx.option("csi_address", "")))
        self.driver = ""
        self.expands = False
        self.recorder = ctx.recorder("external-resizer")
        self.claims = ctx.informers.get("/api/v1/persistentvolumeclaims")
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.claims.add_handler(
            **self.handlers(lambda c: f"{meta(c).get('namespace')}/{meta(c).get('name')}")
        )
        self.volumes.add_handler(**self.handlers(_claim_key))

    async def sync(self, key: str) -> None:
        if not self.driver:
            self.driver = await self.csi.plugin_name()
            self.expands = EXPAND in await self.csi.controller_capabilities()
        claim = self.claims.get(key)
        if claim is None or meta(claim).get("deletionTimestamp") or _status(claim).get("phase") != "Bound":
            return
        pv = self.volumes.get((claim.get("spec") or {}).get("volumeName") or "")
        source = ((pv or {}).get("spec") or {}).get("csi") or {}
        ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
        if pv is None or source.get("driver") != self.driver or ref.get("uid") != meta(claim).get("uid"):
            return
        size = target_size(claim, pv)
        if size is not None:
            await self.resize(claim, pv, size)

    async def resize(self, claim: Obj, pv: Obj, size: int) -> None:
        pv_name = meta(pv).get("name", "")
        status = _status(claim)
        claim = await self._claim_status(
            claim,
            {
                "conditions": merge_conditions(status.get("conditions") or [], [condition(RESIZING)]),
                "allocatedResources": {"storage": binary(size)},
                "allocatedResourceStatuses": {"storage": CONTROLLER_IN_PROGRESS},
            },
        )
        self.recorder.event(claim, NORMAL, "Resizing", f"External resizer is resizing volume {pv_name}")
        new_size, node_required = size, True
        if self.expands:
            source = (pv.get("spec") or {}).get("csi") or {}
            modes = (pv.get("spec") or {}).get("accessModes") or ["ReadWriteOnce"]
            cap = capability(
                source.get("fsType") or "",
                list((pv.get("spec") or {}).get("mountOptions") or []),
                ACCESS_MODES.get(modes[0], 1),
            )
            try:
                got, node_required = await self.csi.controller_expand(
                    source.get("volumeHandle", ""), size, cap, {}
                )
            except CSICallError as err:
                await self._failed(claim, pv_name, err)
                raise
            new_size = got or size
        await self._patch(vol.volume_path(pv_name), {"spec": {"capacity": {"storage": binary(new_size)}}})
        conditions = _status(claim).get("conditions") or []
        if node_required:
            await self._claim_status(
                claim,
                {
                    "conditions": merge_conditions(conditions, [condition(FS_PENDING, FS_PENDING_MESSAGE)]),
                    "allocatedResourceStatuses": {"storage": NODE_PENDING},
                },
            )
            self.recorder.event(
                claim, NORMAL, "FileSystemResizeRequired", "Require file system resize of volume on node"
            )
        else:
            await self._claim_status(
                claim,
                {
                    "capacity": {"storage": binary(new_size)},
                    "conditions": merge_conditions(conditions, []) or None,
                    "allocatedResourceStatuses": {"storage": None},
                },
            )
            self.recorder.event(claim, NORMAL, "VolumeResizeSuccessful", "Resize volume succeeded")
        log.info("resized volume=%s size=%d node_required=%s", pv_name, new_size, node_required)

    async def _failed(self, claim: Obj, pv_name: str, err: CSICallError) -> None:
        message = f'resize volume "{pv_name}" by resizer "{self.driver}" failed: {err}'
        if err.code in INFEASIBLE_CODES:
            await self._claim_status(claim, {"allocatedResourceStatuses": {"storage": CONTROLLER_INFEASIBLE}})
        self.recorder.event(claim, WARNING, "VolumeResizeFailed", message)

    async def _claim_status(self, claim: Obj, status: Obj) -> Obj:
        m = meta(claim)
        path = vol.claim_path(m.get("namespace", ""), m.get("name", "")) + "/status"
        body = {"metadata": {"resourceVersion": m.get("resourceVersion")}, "status": status}
        return await self.client.patch(path, body, "application/merge-patch+json")

    async def _patch(self, path: str, body: Obj) -> None:
        try:
            await self.client.patch(path, body, "application/merge-patch+json")
        except ApiError as err:
            if not err.not_found:
                raise


def _claim_key(volume: Obj) -> str | None:
    ref = (volume.get("spec") or {}).get("claimRef") or {}
    return f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else None
