"""CSI volumes, as upstream's kubelet CSI plugin (pkg/volume/csi) sets them up: a persistentVolumeClaim
whose volume is a `csi` source, and a CSI ephemeral inline volume (a pod volume with `csi:`).

For a persistent volume, where the CSIDriver object says attachRequired (or there is no CSIDriver,
upstream's default) the VolumeAttachment `csi-<sha256(handle+driver+node)>` must say attached, and its
attachmentMetadata is the publish context. NodeStageVolume runs once per volume and node, at the global
mount <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount (when the driver has
STAGE_UNSTAGE_VOLUME); NodePublishVolume runs once per pod at
<root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount with the access mode, fsType, mount options,
readOnly, the volume attributes and, when the CSIDriver asks for podInfoOnMount, the pod's name,
namespace, uid and service account. The pod's fsGroup goes to a driver whose node service has
VOLUME_MOUNT_GROUP as the capability's volume_mount_group (the driver mounts with it and the agent walks
nothing); any other driver's publication gets it from the agent, as the CSIDriver's fsGroupPolicy says.
Beside each mount a vol_data.json records what was done, so the
reverse (NodeUnpublishVolume per pod, NodeUnstageVolume once no pod of the node needs the volume)
needs nothing but the folder: it runs when the pod goes, also after the agent restarted. As upstream's
kubelet saves its volume data before the call, the record is written before NodeStageVolume and
NodePublishVolume, marked uncertain until the call succeeds: a call that ends in a non-final error
(upstream's isFinalError: DeadlineExceeded, Unavailable, Canceled, ResourceExhausted, Aborted) may still
have mounted (the driver goes on after the agent stopped waiting), so the record stays, the next try
calls the driver again (the calls are idempotent), and when the pod goes the volume is unpublished and
unstaged as if the call had succeeded (upstream's VolumeMountUncertain / DeviceMountUncertain). A final
error means nothing was mounted: the record goes and nothing is undone. The staging's record names the
pods that staged it, so a staging no pod needs any more is unstaged even when no publication followed.
vol_data.json also names the pod's volume and the claim behind it, so `stats` (NodeGetVolumeStats,
where the driver has GET_VOLUME_STATS, at most once a minute per volume, not on an uncertain
publication) gives the Summary and kubelet_volume_stats_* their figures. On each sync of the pod, a
claim the resizer left waiting for the node (NodeResizePending) gets NodeExpandVolume on the
publication and its new capacity (expand_persistent).

A driver that is not registered or a driver call that fails keeps the pod waiting with upstream's
FailedMount message for the operation (MountDevice for NodeStageVolume and a persistent volume's missing
driver, SetUp for NodePublishVolume); an attachment not there yet keeps it waiting without one (the
attach/detach controller reports FailedAttachVolume). The pod manager tries again on its next pass.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from agent.csi.registry import DriverRegistry, RegisteredDriver
from agent.volumes.emptydir import unmount_under
from agent.volumes.plugin import AttachPending, ReadyVolume, VolumeError, VolumeHost, VolumeUsage
from kubeclient.csi.client import ACCESS_MODES, CSICallError, attachment_name, capability
from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.csi.resize import NODE_IN_PROGRESS, NODE_PENDING, merge_conditions, resize_status
from kubeclient.events import NORMAL, WARNING
from kubeclient.volumes import claim_path, ephemeral_claim_name, storage_bytes

log = logging.getLogger("agent.volumes.csi")

FOLDER = "kubernetes.io~csi"
DATA_FILE = "vol_data.json"
GLOBAL = "plugins/kubernetes.io/csi"  # under the root dir: <driver>/<sha256(handle)>/globalmount
POD_INFO = {
    "csi.storage.k8s.io/pod.name": ("metadata", "name"),
    "csi.storage.k8s.io/pod.namespace": ("metadata", "namespace"),
    "csi.storage.k8s.io/pod.uid": ("metadata", "uid"),
    "csi.storage.k8s.io/serviceAccount.name": ("spec", "serviceAccountName"),
}
EPHEMERAL_KEY = "csi.storage.k8s.io/ephemeral"
STAGE_CAP = pb.NodeServiceCapability.RPC.STAGE_UNSTAGE_VOLUME
STATS_CAP = pb.NodeServiceCapability.RPC.GET_VOLUME_STATS
EXPAND_CAP = pb.NodeServiceCapability.RPC.EXPAND_VOLUME
MOUNT_GROUP_CAP = pb.NodeServiceCapability.RPC.VOLUME_MOUNT_GROUP
PUBLISH_SECRET = ("MountVolume.SetUp", "NodePublishSecretRef")
STAGE_SECRET = ("MountVolume.MountDevice", "NodeStageSecretRef")
STATS_PERIOD = 60.0  # upstream's volumeStatsAggPeriod: a volume's figures are asked for at most this often
# gRPC codes after which a stage or publish call may still be under way or done (upstream's isFinalError)
NOT_FINAL = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


@dataclass
class VolumeData:
    """What vol_data.json keeps beside a publication (and, with an empty target, beside a staging)."""

    driver: str
    handle: str
    target: str
    staging: str = ""
    ephemeral: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    uncertain: bool = False  # the call was made and did not succeed: it may have mounted
    pods: list[str] = field(default_factory=list)  # a staging's: the uids of the pods that staged it


def _write_data(folder: Path, data: VolumeData) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DATA_FILE).write_text(json.dumps(asdict(data)))


def _read_data(path: Path) -> VolumeData | None:
    try:
        return VolumeData(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _publications(root: Path) -> list[VolumeData]:
    out = []
    for data_file in root.glob(f"pods/*/volumes/{FOLDER}/*/{DATA_FILE}"):
        data = _read_data(data_file)
        if data is not None:
            out.append(data)
    return out


class CSIPlugin:
    """kind `csi` (inline ephemeral volumes) and the `csi` PersistentVolume source of claims."""

    kind = "csi"
    field = "csi"

    def __init__(self, registry: DriverRegistry, node_name: str) -> None:
        self.registry = registry
        self.node_name = node_name
        self._lock = asyncio.Lock()  # stage counts and unstage decisions see one state
        self._stats: dict[str, VolumeUsage] = {}  # by publication target, each at most STATS_PERIOD old

    # inline ephemeral volume
    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        src = volume["csi"] or {}
        name, driver_name = volume["name"], src.get("driver", "")
        driver, csidriver = await self._driver(host, driver_name, name)
        modes = ((csidriver or {}).get("spec") or {}).get("volumeLifecycleModes") or ["Persistent"]
        if "Ephemeral" not in modes:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{name}" : volume mode "Ephemeral" not supported by '
                f"driver {driver_name} (only supports {json.dumps(modes)})"
            )
        # upstream's handle for an inline volume: csi-<sha256(pod uid + volume name)>
        handle = "csi-" + hashlib.sha256((pod["metadata"]["uid"] + name).encode()).hexdigest()
        context = dict(src.get("volumeAttributes") or {})
        context.update(_pod_info(pod, csidriver, ephemeral=True))
        ref = src.get("nodePublishSecretRef")
        secrets = await _secrets(
            host, PUBLISH_SECRET, name, {**ref, "namespace": pod["metadata"]["namespace"]} if ref else None
        )
        read_only = bool(src.get("readOnly"))
        try:
            group = volume_mount_group(await driver.client.node_capabilities(), pod)
        except CSICallError as err:
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{name}" : kubernetes.io/csi: mounter.SetUpAt failed to '
                f"determine if the node service has VOLUME_MOUNT_GROUP capability: {err}"
            ) from None
        cap = capability(src.get("fsType") or "", [], ACCESS_MODES["ReadWriteOnce"], mount_group=group)
        target = host.folder(pod, "csi", name) / "mount"
        await self._publish(
            driver, name, handle, "", target, cap, read_only, {}, context, secrets, True, {"volume": name}
        )
        if not group:
            await self._own(host, pod, csidriver, src.get("fsType") or "", None, target, read_only)
        return ReadyVolume(name, self.kind, str(target), read_only)

    # persistent volume behind a claim
    async def set_up_persistent(
        self, host: VolumeHost, pod: dict[str, Any], volume: str, pv: dict[str, Any], read_only: bool
    ) -> str:
        spec = pv.get("spec") or {}
        src = spec["csi"]
        pv_name = pv["metadata"]["name"]
        driver_name, handle = src.get("driver", ""), src.get("volumeHandle", "")
        driver, csidriver = await self._driver(host, driver_name, pv_name, persistent=True)
        attach = ((csidriver or {}).get("spec") or {}).get("attachRequired", True) if csidriver else True
        publish_context: dict[str, str] = {}
        if attach:
            publish_context = await self._attached(host, driver_name, handle, pv_name)
        modes = spec.get("accessModes") or ["ReadWriteOnce"]
        node_caps = await self._node_caps(driver, pv_name)
        group = volume_mount_group(node_caps, pod)
        cap = capability(
            src.get("fsType") or "",
            list(spec.get("mountOptions") or []),
            ACCESS_MODES.get(modes[0], 1),
            mount_group=group,
        )
        context = dict(src.get("volumeAttributes") or {})
        staging = ""
        if STAGE_CAP in node_caps:
            staging = str(self._global_dir(host, driver_name, handle) / "globalmount")
            stage_secrets = await _secrets(host, STAGE_SECRET, pv_name, src.get("nodeStageSecretRef"))
            await self._stage(
                driver,
                pod["metadata"]["uid"],
                pv_name,
                handle,
                staging,
                cap,
                publish_context,
                context,
                stage_secrets,
            )
        context.update(_pod_info(pod, csidriver, ephemeral=False))
        secrets = await _secrets(host, PUBLISH_SECRET, pv_name, src.get("nodePublishSecretRef"))
        target = host.folder(pod, "csi", pv_name) / "mount"
        await self._publish(
            driver,
            pv_name,
            handle,
            staging,
            target,
            cap,
            read_only,
            publish_context,
            context,
            secrets,
            False,
            _claim_of(pod, volume),
        )
        if not group:  # a driver that mounts with the group applies it itself
            await self._own(
                host,
                pod,
                csidriver,
                src.get("fsType") or "",
                list(spec.get("accessModes") or []),
                target,
                read_only,
            )
        return str(target)

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        return False

    async def tear_down(self, host: VolumeHost, uid: str) -> None:
        """NodeUnpublishVolume for each CSI volume of the pod (an uncertain publication too), then
        NodeUnstageVolume for each staging the pod used (an uncertain one too) that no other pod of the
        node publishes or staged. A driver that is gone meanwhile cannot be asked: its mounts are taken
        away here, so nothing stays mounted."""
        folder = host.pod_volumes_dir(uid) / FOLDER
        entries = await asyncio.to_thread(lambda: sorted(folder.glob(f"*/{DATA_FILE}")))
        async with self._lock:
            stagings: dict[str, VolumeData] = {}
            for data_file in entries:
                data = await asyncio.to_thread(_read_data, data_file)
                if data is None:
                    continue
                await self._unpublish(data)
                await asyncio.to_thread(data_file.unlink, True)
                if data.staging:  # its own record (naming the pods that staged it), else the publication's
                    own = await asyncio.to_thread(_read_data, Path(data.staging).parent / DATA_FILE)
                    stagings[data.staging] = own or data
            stagings.update(await asyncio.to_thread(_release_stagings, host.root_dir, uid))
            users = await asyncio.to_thread(_publications, host.root_dir)
            for staging, data in stagings.items():
                if not data.pods and not any(u.staging == staging for u in users):
                    await self._unstage(data)

    async def stats(self, host: VolumeHost, uid: str) -> list[VolumeUsage]:
        """NodeGetVolumeStats on each CSI volume the pod has published, when its driver has the
        GET_VOLUME_STATS capability (upstream's csi metrics provider; a driver without it, or one not
        registered, reports nothing for the volume), remembered for STATS_PERIOD."""
        folder = host.pod_volumes_dir(uid) / FOLDER
        entries = await asyncio.to_thread(lambda: sorted(folder.glob(f"*/{DATA_FILE}")))
        now = time.time()
        out = []
        for data_file in entries:
            data = await asyncio.to_thread(_read_data, data_file)
            if data is None or data.uncertain:
                continue
            known = self._stats.get(data.target)
            if known is None or now - known.time >= STATS_PERIOD:
                known = await self._measure(data, f"{FOLDER}/{data_file.parent.name}", now)
                if known is None:
                    continue
                self._stats[data.target] = known
            out.append(known)
        live = {str(f.parent / "mount") for f in entries}
        for target in [t for t in self._stats if t.startswith(str(folder) + "/") and t not in live]:
            del self._stats[target]
        return out

    async def in_use(self, host: VolumeHost) -> list[str]:
        """kubernetes.io/csi/<driver>^<handle> of each persistent CSI volume published or staged on the
        node (upstream's unique volume name), for node.status.volumesInUse: the attach/detach controller
        detaches none of them."""

        def scan() -> list[str]:
            found = _publications(host.root_dir)
            found += [d for f in host.root_dir.glob(f"{GLOBAL}/*/*/{DATA_FILE}") if (d := _read_data(f))]
            return [f"kubernetes.io/csi/{d.driver}^{d.handle}" for d in found if not d.ephemeral]

        return await asyncio.to_thread(scan)

    async def expand_persistent(
        self, host: VolumeHost, pod: dict[str, Any], volume: str, claim_name: str
    ) -> None:
        """The kubelet's part of an online expansion (upstream's NodeExpander): when the PV has grown past
        the claim's capacity and the resizer left the claim NodeResizePending (or a previous try left it
        NodeResizeInProgress), mark it NodeResizeInProgress, call NodeExpandVolume on the publication
        (where the driver has the node EXPAND_VOLUME capability), then record FileSystemResizeSuccessful
        on the pod and the claim and set the claim's capacity, its resize condition and status gone. A
        failed call is a FileSystemResizeFailed warning; the next sync of the pod tries again."""
        data = await asyncio.to_thread(_publication_of, host.pod_volumes_dir(pod["metadata"]["uid"]), volume)
        namespace = pod["metadata"].get("namespace", "")
        if data is None or host.patch is None:
            return
        claim = await host.fetch("PersistentVolumeClaim", namespace, claim_name)
        pv_name = ((claim or {}).get("spec") or {}).get("volumeName") or ""
        pv = await host.fetch("PersistentVolume", "", pv_name) if pv_name else None
        if claim is None or pv is None:
            return
        new_size = ((pv.get("spec") or {}).get("capacity") or {}).get("storage")
        status_size = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
        if storage_bytes(new_size) <= storage_bytes(status_size) or resize_status(claim) not in (
            NODE_PENDING,
            NODE_IN_PROGRESS,
        ):
            return
        driver = self.registry.get(data.driver)
        if driver is None:
            return
        path = claim_path(namespace, claim_name) + "/status"
        claim = await host.patch(
            path, {"status": {"allocatedResourceStatuses": {"storage": NODE_IN_PROGRESS}}}
        )
        where = f'MountVolume.NodeExpandVolume {{}} for volume "{pv_name}"'
        try:
            if EXPAND_CAP in await driver.client.node_capabilities():
                spec = pv.get("spec") or {}
                modes = spec.get("accessModes") or ["ReadWriteOnce"]
                cap = capability(
                    (spec.get("csi") or {}).get("fsType") or "",
                    list(spec.get("mountOptions") or []),
                    ACCESS_MODES.get(modes[0], 1),
                )
                await driver.client.node_expand(
                    data.handle, data.target, data.staging, storage_bytes(new_size), cap, {}
                )
        except CSICallError as err:
            if host.record is not None:
                host.record(pod, WARNING, "FileSystemResizeFailed", f"{where.format('failed')} : {err}")
            return
        message = f"{where.format('succeeded')} {self.node_name}"
        if host.record is not None:
            host.record(pod, NORMAL, "FileSystemResizeSuccessful", message)
            host.record(claim, NORMAL, "FileSystemResizeSuccessful", message)
        conditions = merge_conditions((claim.get("status") or {}).get("conditions") or [], [])
        await host.patch(
            path,
            {
                "status": {
                    "capacity": {"storage": new_size},
                    "conditions": conditions or None,
                    "allocatedResourceStatuses": {"storage": None},
                }
            },
        )
        log.info("expanded volume=%s on the node size=%s", pv_name, new_size)

    async def _measure(self, data: VolumeData, folder: str, now: float) -> VolumeUsage | None:
        driver = self.registry.get(data.driver)
        if driver is None:
            return None
        try:
            if STATS_CAP not in await driver.client.node_capabilities():
                return None
            got = await driver.client.volume_stats(data.handle, data.target, data.staging)
        except CSICallError as err:
            log.info("NodeGetVolumeStats failed volume=%s error=%r", data.handle, str(err))
            return None
        claim = (data.extra.get("namespace", ""), data.extra["claim"]) if data.extra.get("claim") else None
        return VolumeUsage(
            data.extra.get("volume") or Path(folder).name,
            folder,
            now,
            got.total,
            got.available,
            got.used,
            got.inodes,
            got.inodes_free,
            got.inodes_used,
            claim,
        )

    async def _driver(
        self, host: VolumeHost, name: str, volume: str, persistent: bool = False
    ) -> tuple[RegisteredDriver, dict[str, Any] | None]:
        """The registered driver and its CSIDriver object. Not registered: upstream's message from where
        its kubelet first needs the client (MountDevice for a persistent volume, SetUp for an inline one)."""
        driver = self.registry.get(name)
        if driver is None:
            where = (
                f'MountVolume.MountDevice failed for volume "{volume}" : kubernetes.io/csi: attacher.MountDevice '
                "failed to create newCsiDriverClient"
                if persistent
                else f'MountVolume.SetUp failed for volume "{volume}" : kubernetes.io/csi: mounter.SetUpAt '
                "failed to get CSI client"
            )
            raise VolumeError(f"{where}: driver name {name} not found in the list of registered CSI drivers")
        return driver, await host.fetch("CSIDriver", "", name)

    async def _attached(self, host: VolumeHost, driver: str, handle: str, pv_name: str) -> dict[str, str]:
        """The attachment's metadata once the attacher says attached. Until then the pod waits without an
        event of the kubelet's (AttachPending): upstream's kubelet waits for the node's volumesAttached
        silently, and the attach/detach controller reports FailedAttachVolume."""
        name = attachment_name(handle, driver, self.node_name)
        attachment = await host.fetch("VolumeAttachment", "", name)
        status = (attachment or {}).get("status") or {}
        if status.get("attached") and not (attachment or {}).get("metadata", {}).get("deletionTimestamp"):
            return dict(status.get("attachmentMetadata") or {})
        log.info("volume not attached yet volume=%s attachment=%s", pv_name, name)
        raise AttachPending()

    async def _node_caps(self, driver: RegisteredDriver, volume: str) -> set[int]:
        try:
            return await driver.client.node_capabilities()
        except CSICallError as err:
            raise VolumeError(f'MountVolume.MountDevice failed for volume "{volume}" : {err}') from None

    def _global_dir(self, host: VolumeHost, driver: str, handle: str) -> Path:
        digest = hashlib.sha256(handle.encode()).hexdigest()
        return host.root_dir / GLOBAL / driver / digest

    async def _stage(
        self,
        driver: RegisteredDriver,
        uid: str,
        volume: str,
        handle: str,
        staging: str,
        cap: pb.VolumeCapability,
        publish_context: dict[str, str],
        context: dict[str, str],
        secrets: dict[str, str],
    ) -> None:
        folder = Path(staging).parent
        async with self._lock:
            known = await asyncio.to_thread(_read_data, folder / DATA_FILE)
            pods = sorted({*(known.pods if known else []), uid})
            record = VolumeData(driver.name, handle, "", staging, pods=pods)
            if known is not None and not known.uncertain:  # staged once for the node
                if uid not in known.pods:
                    await asyncio.to_thread(_write_data, folder, record)
                return
            await asyncio.to_thread(_write_data, folder, replace(record, uncertain=True))
            try:
                await driver.client.stage(handle, staging, cap, publish_context, context, secrets)
            except CSICallError as err:
                if is_final(err):  # nothing was staged: nothing to unstage
                    await asyncio.to_thread(_remove_folder, folder, "globalmount")
                else:
                    log.info(
                        "NodeStageVolume uncertain volume=%s staging=%s error=%r", volume, staging, str(err)
                    )
                raise VolumeError(f'MountVolume.MountDevice failed for volume "{volume}" : {err}') from None
            await asyncio.to_thread(_write_data, folder, record)

    async def _publish(
        self,
        driver: RegisteredDriver,
        volume: str,
        handle: str,
        staging: str,
        target: Path,
        cap: pb.VolumeCapability,
        read_only: bool,
        publish_context: dict[str, str],
        context: dict[str, str],
        secrets: dict[str, str],
        ephemeral: bool,
        extra: dict[str, str],
    ) -> None:
        folder = target.parent
        known = await asyncio.to_thread(_read_data, folder / DATA_FILE)
        if known is not None and not known.uncertain:
            return  # published for this pod already
        record = VolumeData(driver.name, handle, str(target), staging, ephemeral, extra)
        await asyncio.to_thread(_write_data, folder, replace(record, uncertain=True))
        try:
            await driver.client.publish(
                handle, staging, str(target), cap, read_only, publish_context, context, secrets
            )
        except CSICallError as err:
            if is_final(err):  # nothing was published: nothing to unpublish
                await asyncio.to_thread(_remove_folder, folder, target.name)
            else:
                log.info("NodePublishVolume uncertain volume=%s target=%s error=%r", volume, target, str(err))
            raise VolumeError(f'MountVolume.SetUp failed for volume "{volume}" : {err}') from None
        await asyncio.to_thread(_write_data, folder, record)

    async def _unpublish(self, data: VolumeData) -> None:
        driver = self.registry.get(data.driver)
        if driver is not None:
            try:
                await driver.client.unpublish(data.handle, data.target)
                return
            except CSICallError as err:
                log.warning("NodeUnpublishVolume failed volume=%s error=%r", data.handle, str(err))
        else:
            log.warning(
                "CSI driver gone, unmounting its publication driver=%s target=%s", data.driver, data.target
            )
        await asyncio.to_thread(unmount_under, Path(data.target))

    async def _unstage(self, data: VolumeData) -> None:
        driver = self.registry.get(data.driver)
        folder = Path(data.staging).parent
        done = False
        if driver is not None:
            try:
                await driver.client.unstage(data.handle, data.staging)
                done = True
            except CSICallError as err:
                log.warning("NodeUnstageVolume failed volume=%s error=%r", data.handle, str(err))
        if not done:
            await asyncio.to_thread(unmount_under, Path(data.staging))
        await asyncio.to_thread(_remove_folder, folder, "globalmount")

    async def _own(
        self,
        host: VolumeHost,
        pod: dict[str, Any],
        csidriver: dict[str, Any] | None,
        fs_type: str,
        modes: list[str] | None,
        target: Path,
        read_only: bool,
    ) -> None:
        """fsGroup on the publication where upstream's csiMountMgr applies it (supportsFSGroup)."""
        psc = (pod.get("spec") or {}).get("securityContext") or {}
        if fs_group_applies(csidriver, psc.get("fsGroup"), fs_type, modes, read_only):
            await host.own(pod, target, read_only=False)


def _publication_of(pod_volumes: Path, volume: str) -> VolumeData | None:
    """The persistent CSI publication of the pod's volume `volume`, from its vol_data.json."""
    for data_file in sorted((pod_volumes / FOLDER).glob(f"*/{DATA_FILE}")):
        data = _read_data(data_file)
        if (
            data is not None
            and not data.ephemeral
            and not data.uncertain
            and data.extra.get("volume") == volume
        ):
            return data
    return None


def _claim_of(pod: dict[str, Any], volume: str) -> dict[str, str]:
    """What vol_data.json keeps of the pod's volume for its stats: the pod's volume name and the claim
    behind it (the claim of a generic ephemeral volume is the one the controller made)."""
    spec = next((v for v in (pod.get("spec") or {}).get("volumes") or [] if v.get("name") == volume), {})
    out = {"volume": volume}
    if isinstance(spec.get("persistentVolumeClaim"), dict):
        out["claim"] = spec["persistentVolumeClaim"].get("claimName", "")
    elif isinstance(spec.get("ephemeral"), dict):
        out["claim"] = ephemeral_claim_name(pod, spec)
    if "claim" in out:
        out["namespace"] = pod["metadata"].get("namespace", "")
    return out


def volume_mount_group(node_caps: set[int], pod: dict[str, Any]) -> str:
    """The pod's fsGroup as the driver is to mount the volume with it (VolumeCapability.MountVolume's
    volume_mount_group in NodeStageVolume and NodePublishVolume), when the driver's node service has the
    VOLUME_MOUNT_GROUP capability: upstream's DelegateFSGroupToCSIDriver, GA since 1.26, under which
    the kubelet then changes no ownership itself and does not look at the CSIDriver's fsGroupPolicy.
    "" when the driver lacks the capability or the pod sets no fsGroup."""
    fs_group = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    if fs_group is None or MOUNT_GROUP_CAP not in node_caps:
        return ""
    return str(int(fs_group))


def fs_group_applies(
    csidriver: dict[str, Any] | None, fs_group: Any, fs_type: str, modes: list[str] | None, read_only: bool
) -> bool:
    """Whether the kubelet sets the pod's fsGroup on a CSI publication, by the CSIDriver's fsGroupPolicy
    (ReadWriteOnceWithFSType without a CSIDriver or a policy): never without an fsGroup, for a read-only
    publication or with None; always with File; with ReadWriteOnceWithFSType when the volume has an
    fsType and one of the PV's access modes is ReadWriteOnce (`modes` None: an inline volume, always
    mounted ReadWriteOnce)."""
    policy = ((csidriver or {}).get("spec") or {}).get("fsGroupPolicy") or "ReadWriteOnceWithFSType"
    if fs_group is None or policy == "None" or read_only:
        return False
    if policy == "File":
        return True
    return bool(fs_type) and (modes is None or "ReadWriteOnce" in modes)


def _remove_folder(folder: Path, mount_dir: str) -> None:
    """A staging's or publication's record and its folders (a mount point among them stays)."""
    (folder / DATA_FILE).unlink(missing_ok=True)
    for sub in (folder / mount_dir, folder):
        try:
            sub.rmdir()
        except OSError:
            pass


def _release_stagings(root: Path, uid: str) -> dict[str, VolumeData]:
    """The node's stagings the pod `uid` staged, each with the pod taken off its record."""
    out = {}
    for data_file in root.glob(f"{GLOBAL}/*/*/{DATA_FILE}"):
        data = _read_data(data_file)
        if data is None or uid not in data.pods:
            continue
        data = replace(data, pods=[p for p in data.pods if p != uid])
        _write_data(data_file.parent, data)
        out[data.staging] = data
    return out


def is_final(err: CSICallError) -> bool:
    """Whether a failed stage or publish call surely did nothing (upstream's isFinalError): a timeout,
    a cancelled call, an unavailable or exhausted driver and an operation still pending (Aborted) may
    have mounted, or may still mount."""
    return err.code not in NOT_FINAL


def _pod_info(pod: dict[str, Any], csidriver: dict[str, Any] | None, ephemeral: bool) -> dict[str, str]:
    """The pod's identity in the volume context when the CSIDriver asks (podInfoOnMount), with
    whether the volume is an inline ephemeral one, as upstream's mounter adds them."""
    if not ((csidriver or {}).get("spec") or {}).get("podInfoOnMount"):
        return {}
    out = {key: str((pod.get(part) or {}).get(name) or "") for key, (part, name) in POD_INFO.items()}
    out[EPHEMERAL_KEY] = "true" if ephemeral else "false"
    return out


async def _secrets(
    host: VolumeHost, which: tuple[str, str], volume: str, ref: dict[str, Any] | None
) -> dict[str, str]:
    """The data of the Secret `ref` names, for a stage or publish call (`which`: the operation and the
    field); one that cannot be read fails the operation with upstream's message."""
    if not ref or not ref.get("name"):
        return {}
    namespace, name = ref.get("namespace") or "", ref["name"]
    secret = await host.fetch("Secret", namespace, name)
    if secret is None:
        operation, field = which
        raise VolumeError(
            f'{operation} failed for volume "{volume}" : fetching {field} {namespace}/{name} failed: '
            f'secrets "{name}" not found'
        )
    return {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
