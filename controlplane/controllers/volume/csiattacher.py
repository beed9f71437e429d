"""The CSI external attacher, as kubernetes-csi/external-attacher does it beside a driver: a
VolumeAttachment naming this driver as attacher is attached with ControllerPublishVolume (the volume's
handle, the node's ID for the driver from its CSINode, the PV's access mode, readOnly and attributes)
and its status says `attached: true` with the driver's publish context as attachmentMetadata (or the
attachError); the finalizer `external-attacher/<driver>` keeps it until, once it is being deleted,
ControllerUnpublishVolume detached it. A driver without the PUBLISH_UNPUBLISH_VOLUME capability is
attached at once, as upstream's attacher does for such drivers.

It runs where the provisioner runs (csiprovisioner.py): a controller of a manager beside the driver.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from kubeclient.csi.client import ACCESS_MODES, CSICallError, CSIClient, capability
from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.errors import ApiError
from kubeclient.eventcorrelator import rfc3339
from kubeclient.informer import meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"
PUBLISH = pb.ControllerServiceCapability.RPC.PUBLISH_UNPUBLISH_VOLUME


def finalizer(driver: str) -> str:
    return "external-attacher/" + driver.replace("/", "-")


def node_id(csinode: Obj | None, driver: str) -> str:
    for entry in ((csinode or {}).get("spec") or {}).get("drivers") or []:
        if entry.get("name") == driver:
            return str(entry.get("nodeID") or "")
    return ""


class CSIAttacher(Controller):
    name = "csi-attacher"
    account = "csi-attacher"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.csi = CSIClient(str(ctx.option("csi_address", "")))
        self.driver = ""
        self.publishes = False
        self.attachments = ctx.informers.get(ATTACHMENTS)
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.csinodes = ctx.informers.get("/apis/storage.k8s.io/v1/csinodes")
        self.attachments.add_handler(**self.handlers(lambda a: meta(a).get("name", "")))

    async def sync(self, key: str) -> None:
        if not self.driver:
            self.driver = await self.csi.plugin_name()
            self.publishes = PUBLISH in await self.csi.controller_capabilities()
        attachment = self.attachments.get(key)
        if attachment is None or (attachment.get("spec") or {}).get("attacher") != self.driver:
            return
        if meta(attachment).get("deletionTimestamp"):
            await self.detach(attachment)
        elif not (attachment.get("status") or {}).get("attached"):
            await self.attach(attachment)

    async def attach(self, attachment: Obj) -> None:
        spec = attachment.get("spec") or {}
        name = meta(attachment).get("name", "")
        finalizers = list(meta(attachment).get("finalizers") or [])
        if finalizer(self.driver) not in finalizers:
            await self._patch(
                f"{ATTACHMENTS}/{name}",
                {
                    "metadata": {
                        "finalizers": [*finalizers, finalizer(self.driver)],
                        "resourceVersion": meta(attachment).get("resourceVersion"),
                    }
                },
            )
            return  # the update brings the attachment back
        context: dict[str, str] = {}
        if self.publishes:
            pv = self.volumes.get((spec.get("source") or {}).get("persistentVolumeName") or "")
            node = node_id(self.csinodes.get(spec.get("nodeName", "")), self.driver)
            if pv is None or not node:
                raise RuntimeError(
                    f"attachment {name}: its volume or the node's ID for {self.driver} is not known yet"
                )
            source = (pv.get("spec") or {}).get("csi") or {}
            modes = (pv.get("spec") or {}).get("accessModes") or ["ReadWriteOnce"]
            cap = capability(
                source.get("fsType") or "",
                list((pv.get("spec") or {}).get("mountOptions") or []),
                ACCESS_MODES.get(modes[0], 1),
            )
            try:
                context = await self.csi.controller_publish(
                    source.get("volumeHandle", ""),
                    node,
                    cap,
                    bool(source.get("readOnly")),
                    source.get("volumeAttributes") or {},
                )
            except CSICallError as err:
                await self._status(
                    name,
                    {"attached": False, "attachError": {"time": rfc3339(time.time()), "message": str(err)}},
                )
                raise
        status: Obj = {"attached": True}
        if context:
            status["attachmentMetadata"] = context
        await self._status(name, status)
        log.info("attached attachment=%s driver=%s", name, self.driver)

    async def detach(self, attachment: Obj) -> None:
        spec = attachment.get("spec") or {}
        name = meta(attachment).get("name", "")
        finalizers = list(meta(attachment).get("finalizers") or [])
        if finalizer(self.driver) not in finalizers:
            return
        if self.publishes:
            pv = self.volumes.get((spec.get("source") or {}).get("persistentVolumeName") or "")
            handle = (((pv or {}).get("spec") or {}).get("csi") or {}).get("volumeHandle", "")
            node = node_id(self.csinodes.get(spec.get("nodeName", "")), self.driver)
            if handle and node:
                try:
                    await self.csi.controller_unpublish(handle, node)
                except CSICallError as err:
                    await self._status(
                        name,
                        {
                            "attached": True,
                            "detachError": {"time": rfc3339(time.time()), "message": str(err)},
                        },
                    )
                    raise
        await self._patch(
            f"{ATTACHMENTS}/{name}",
            {
                "metadata": {
                    "finalizers": [f for f in finalizers if f != finalizer(self.driver)],
                    "resourceVersion": meta(attachment).get("resourceVersion"),
                }
            },
        )
        log.info("detached attachment=%s driver=%s", name, self.driver)

    async def _status(self, name: str, status: Obj) -> None:
        await self._patch(f"{ATTACHMENTS}/{name}/status", {"status": status})

    async def _patch(self, path: str, body: Obj) -> None:
        try:
            await self.client.patch(path, body, "application/merge-patch+json")
        except ApiError as err:
            if not err.not_found:
                raise
