"""The attach/detach controller, as upstream's (pkg/controller/volume/attachdetach) does it for CSI
volumes: for every node, the CSI persistent volumes its pods use (through their claims, generic ephemeral
ones included) whose CSIDriver requires attach (or that have no CSIDriver object, upstream's default) get
a VolumeAttachment `csi-<sha256(handle + driver + node)>` naming the driver as attacher; the external
attacher beside the driver attaches it and the node waits for `attached`. A VolumeAttachment no pod of
its node needs any more is deleted (the attacher detaches it and lets it go). An attach error reported
on the attachment becomes upstream's FailedAttachVolume event on the pods waiting for it, and so does an
attachment still not attached ATTACH_TIMEOUT after it was made (upstream's csiAttacher gives up its wait
after 2 minutes, `timed out waiting for external-attacher of <driver> CSI driver to attach volume <handle>`,
and tries again: one such event per timeout).

As upstream's reconciler, an attachment no pod needs is deleted (detached) only once the node no longer
lists the volume (`kubernetes.io/csi/<driver>^<handle>`) in node.status.volumesInUse, which the kubelet
reports while the volume is mounted ("Cannot detach volume because it is still mounted"); a node that is
gone, or tainted node.kubernetes.io/out-of-service, is not waited for. A change of the Node's status
brings the node's attachments back to the queue. The node's status.volumesAttached lists the volumes
whose attachment says attached.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.podutil import parse_time
from kubeclient import volumes as vol
from kubeclient.csi.client import attachment_name
from kubeclient.errors import ApiError
from kubeclient.events import WARNING
from kubeclient.informer import by_node_name, meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
ATTACHMENTS = "/apis/storage.k8s.io/v1/volumeattachments"
RECHECK = 5.0  # seconds: a node whose pods' claims are not bound yet is looked at again
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
ATTACH_TIMEOUT = 120.0  # seconds: upstream's csiTimeout, how long its attacher waits for `attached`


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _node_of_claiming_pod(pod: Obj) -> str | None:
    """The node whose attachments a pod's event may change: only a pod with claims can need one (a pod's
    volumes never change), as upstream's pod handlers process only the pod's own volumes. Every pod
    event used to sync its node, which walks the node's pods: 6.5 % of the controller manager's CPU in
    a density run whose pods have no volumes at all."""
    node = (pod.get("spec") or {}).get("nodeName")
    return node if node and vol.claim_names(pod) else None


class AttachDetachController(Controller):
    name = "attachdetach"
    account = "attachdetach-controller"
    workers = 2

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.recorder = ctx.recorder("attachdetach-controller")
        # A node's sync reads its own pods and attachments only (by index): a walk of every pod per
        # sync, which every pod and node event asks for, grows with the square of the cluster.
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"node": by_node_name})
        self.claims = ctx.informers.get("/api/v1/persistentvolumeclaims")
        self.volumes = ctx.informers.get("/api/v1/persistentvolumes")
        self.drivers = ctx.informers.get("/apis/storage.k8s.io/v1/csidrivers")
        self.attachments = ctx.informers.get(ATTACHMENTS, indexers={"node": by_node_name})
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.nodes.add_handler(**self.handlers(lambda n: meta(n).get("name") or None))
        self.pods.add_handler(**self.handlers(_node_of_claiming_pod))
        self.attachments.add_handler(**self.handlers(lambda a: (a.get("spec") or {}).get("nodeName") or None))
        self._timed_out: dict[str, float] = {}  # attachment -> when its last timeout was reported

    def _wanted(self, node: str) -> tuple[dict[str, Obj], dict[str, list[Obj]], bool]:
        """The attachments the node's pods need (name -> body), the pods needing each, and whether some
        pod's claim could not be followed to a volume yet."""
        wanted: dict[str, Obj] = {}
        users: dict[str, list[Obj]] = {}
        pending = False
        for pod in self.pods.by_index("node", node):
            if not _running(pod):
                continue
            namespace = meta(pod).get("namespace", "")
            for claim_name in vol.claim_names(pod):
                claim = self.claims.get(f"{namespace}/{claim_name}")
                pv_name = ((claim or {}).get("spec") or {}).get("volumeName") or ""
                pv = self.volumes.get(pv_name) if pv_name else None
                if pv is None:
                    pending = True
                    continue
                source = (pv.get("spec") or {}).get("csi")
                if not isinstance(source, dict):
                    continue
                driver = source.get("driver", "")
                csidriver = self.drivers.get(driver)
                if csidriver is not None and (csidriver.get("spec") or {}).get("attachRequired") is False:
                    continue
                name = attachment_name(source.get("volumeHandle", ""), driver, node)
                wanted[name] = {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "VolumeAttachment",
                    "metadata": {"name": name},
                    "spec": {
                        "attacher": driver,
                        "nodeName": node,
                        "source": {"persistentVolumeName": pv_name},
                    },
                }
                users.setdefault(name, []).append(pod)
        return wanted, users, pending

    async def sync(self, key: str) -> None:
        node = key
        wanted, users, pending = self._wanted(node)
        have = {
            meta(a).get("name", ""): a
            for a in self.attachments.by_index("node", node)
            if ((a.get("spec") or {}).get("source") or {}).get("persistentVolumeName")
        }
        for name, body in wanted.items():
            current = have.get(name)
            if current is None:
                try:
                    await self.client.create(ATTACHMENTS, body)
                    log.info("attachment created node=%s attachment=%s", node, name)
                except ApiError as err:
                    if not err.already_exists:
                        raise
                continue
            error = ((current.get("status") or {}).get("attachError") or {}).get("message")
            if not error:
                error = self._timed_out_waiting(node, name, current)
            if error:
                pv_name = body["spec"]["source"]["persistentVolumeName"]
                for pod in users[name]:
                    self.recorder.event(
                        pod,
                        WARNING,
                        "FailedAttachVolume",
                        f'AttachVolume.Attach failed for volume "{pv_name}" : {error}',
                    )
        for name, current in have.items():
            if name not in wanted and not meta(current).get("deletionTimestamp") and not pending:
                if self._mounted(node, current):
                    log.info(
                        "cannot detach volume because it is still mounted node=%s attachment=%s", node, name
                    )
                    continue
                self._timed_out.pop(name, None)
                try:
                    await self.client.delete(f"{ATTACHMENTS}/{name}")
                    log.info("attachment deleted node=%s attachment=%s", node, name)
                except ApiError as err:
                    if not err.not_found:
                        raise
        await self._report_attached(node, have)
        if pending:
            self.queue.add_after(node, RECHECK)

    def _timed_out_waiting(self, node: str, name: str, attachment: Obj) -> str:
        """The attach timeout's text when it is due (the node looked at again when the next is due)."""
        if (attachment.get("status") or {}).get("attached"):
            self._timed_out.pop(name, None)
            return ""
        spec = attachment.get("spec") or {}
        pv = self.volumes.get((spec.get("source") or {}).get("persistentVolumeName") or "")
        handle = (((pv or {}).get("spec") or {}).get("csi") or {}).get("volumeHandle", "")
        now = time.time()
        message, wait = attach_timeout(attachment, handle, self._timed_out.get(name, 0.0), now)
        if message:
            self._timed_out[name] = now
        self.queue.add_after(node, wait)
        return message

    async def _report_attached(self, node_name: str, have: dict[str, Obj]) -> None:
        """node.status.volumesAttached: the node's volumes whose attachment says attached, by unique name
        (a CSI volume's device path is empty), as upstream's node status updater writes it."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        attached = sorted(
            self._unique_name(a) for a in have.values() if (a.get("status") or {}).get("attached")
        )
        want = [{"name": name, "devicePath": ""} for name in attached]
        if ((node.get("status") or {}).get("volumesAttached") or []) == want:
            return
        try:
            await self.client.patch(
                f"/api/v1/nodes/{node_name}/status", {"status": {"volumesAttached": want or None}}
            )
        except ApiError as err:
            if not err.not_found:
                raise

    def _unique_name(self, attachment: Obj) -> str:
        """kubernetes.io/csi/<driver>^<handle>: the attachment's volume as the kubelet and the controller
        name it in the Node's status."""
        spec = attachment.get("spec") or {}
        pv = self.volumes.get((spec.get("source") or {}).get("persistentVolumeName") or "")
        handle = (((pv or {}).get("spec") or {}).get("csi") or {}).get("volumeHandle", "")
        return f"kubernetes.io/csi/{spec.get('attacher', '')}^{handle}"

    def _mounted(self, node_name: str, attachment: Obj) -> bool:
        """Whether the node still reports the attachment's volume in use (its kubelet has it mounted)."""
        node = self.nodes.get(node_name)
        if node is None or any(
            t.get("key") == OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or []
        ):
            return False
        return self._unique_name(attachment) in ((node.get("status") or {}).get("volumesInUse") or [])


def attach_timeout(attachment: Obj, handle: str, reported: float, now: float) -> tuple[str, float]:
    """Whether an attachment not attached yet has waited a whole ATTACH_TIMEOUT since it was made (or
    since its last timeout was `reported`): upstream's attacher's timeout text ("" before that), and the
    seconds until the next timeout is due."""
    created = parse_time(meta(attachment).get("creationTimestamp")) or datetime.now(UTC)
    left = max(created.timestamp(), reported) + ATTACH_TIMEOUT - now
    if left > 0:
        return "", left
    spec = attachment.get("spec") or {}
    return (
        f"timed out waiting for external-attacher of {spec.get('attacher', '')} CSI driver to attach "
        f"volume {handle}",
        ATTACH_TIMEOUT,
    )
