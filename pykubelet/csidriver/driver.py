"""The host-path CSI driver's services (Identity, Controller, Node) and its registration service.

A volume is the folder <state>/volumes/<volume_id>. CreateVolume makes it (the CO's name is the id, so a
retried call finds the same volume), DeleteVolume removes it. NodeStageVolume binds it at the staging
path, NodePublishVolume binds the staging path (or, for an ephemeral inline volume, a folder made for it
then) at the target, read-only when asked; the Unpublish and Unstage calls undo that. A slow driver:
--stage-delay and --publish-delay make a call whose path is not mounted yet wait first, then mount
nothing once the caller's deadline has passed, or (with --finish-late) mount all the same, as a driver
whose mount completes after the CO stopped waiting (the CO then cannot know whether it mounted). Expansion (on
unless switched off) is online: ControllerExpandVolume takes the new size and asks for the node's part,
NodeExpandVolume checks the published path. With the VOLUME_MOUNT_GROUP node capability switched on, a
NodeStageVolume or NodePublishVolume whose capability carries volume_mount_group gives the volume's root
that group with group read, write and search and the setgid bit, as a file system mounted with a gid=
option shows its root (a bind mount has no such option; what lies inside keeps its owner). ControllerPublish
records the attachment as a file <state>/attachments/<volume_id>@<node_id>. GetCapacity (on unless
switched off) reports what is left of the pool a class's `kind` parameter names in the driver's own
topology segment (none elsewhere), and CreateVolume takes a volume's size from that pool (capacity.py).

Every call is appended to the call log (one JSON line: the method and its request, secrets left out),
so tests can see what the kubelet and the sidecars asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from google.protobuf.json_format import MessageToDict
from google.protobuf.wrappers_pb2 import Int64Value

from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.csi.pb import csi_pb2_grpc as pb_grpc
from kubeclient.csi.pb import registration_pb2 as reg
from kubeclient.csi.pb import registration_pb2_grpc as reg_grpc
from kubeclient.csi.resize import binary
from pykubelet.csidriver.capacity import KIND, Pools
from pykubelet.csidriver.mounts import bind, is_mount_point, unbind

EPHEMERAL = "csi.storage.k8s.io/ephemeral"


def registration_socket(folder: str, name: str) -> str:
    """node-driver-registrar's <folder>/<driver>-reg.sock, which the kubelet watches for."""
    return os.path.join(folder, f"{name}-reg.sock")


@dataclass
class DriverConfig:
    name: str
    node_id: str
    state_dir: Path
    attach_required: bool = False
    max_volumes: int = 0
    topology_key: str = ""
    call_log: Path | None = None
    expansion: bool = True  # ControllerExpandVolume and NodeExpandVolume (online expansion)
    max_volume_size: int = 1 << 40  # bytes: a larger capacity is OUT_OF_RANGE (csi-driver-host-path's 1 TiB)
    mount_group: bool = False  # the VOLUME_MOUNT_GROUP node capability (the CO's fsGroup at mount)
    publish_delay: float = 0.0  # seconds NodePublishVolume takes before it mounts (a slow driver)
    stage_delay: float = 0.0  # seconds NodeStageVolume takes before it mounts
    finish_late: bool = False  # a delayed call mounts even after the caller's deadline passed
    get_capacity: bool = True  # the GET_CAPACITY controller capability
    capacity: dict[str, int] = field(default_factory=dict)  # pool sizes by kind (--capacity); none: no pools


class CallLog:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, method: str, request) -> None:
        if self.path is None:
            return
        fields = MessageToDict(request, preserving_proto_field_name=True)
        fields.pop("secrets", None)  # never written anywhere
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"method": method, "request": fields}) + "\n")


class Driver(pb_grpc.IdentityServicer, pb_grpc.ControllerServicer, pb_grpc.NodeServicer):
    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.log = CallLog(cfg.call_log)
        (cfg.state_dir / "volumes").mkdir(parents=True, exist_ok=True)
        (cfg.state_dir / "attachments").mkdir(parents=True, exist_ok=True)
        (cfg.state_dir / "ephemeral").mkdir(parents=True, exist_ok=True)
        self.pools = Pools(cfg.capacity, cfg.state_dir / "sizes")
        self._space = threading.Lock()  # a pool's check and its new volume's record go together

    def _check_size(self, capacity: pb.CapacityRange, context) -> None:
        if capacity.required_bytes > self.cfg.max_volume_size:
            context.abort(
                grpc.StatusCode.OUT_OF_RANGE,
                f"Requested capacity {capacity.required_bytes} exceeds maximum allowed {self.cfg.max_volume_size}",
            )

    def _volume(self, volume_id: str, context) -> Path:
        if not volume_id or "/" in volume_id or volume_id.startswith("."):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid volume id {volume_id!r}")
        return self.cfg.state_dir / "volumes" / volume_id

    # Identity
    def GetPluginInfo(self, request, context):
        self.log.write("GetPluginInfo", request)
        return pb.GetPluginInfoResponse(name=self.cfg.name, vendor_version="0.1.0")

    def GetPluginCapabilities(self, request, context):
        self.log.write("GetPluginCapabilities", request)
        kinds = [pb.PluginCapability.Service.CONTROLLER_SERVICE]
        if self.cfg.topology_key:
            kinds.append(pb.PluginCapability.Service.VOLUME_ACCESSIBILITY_CONSTRAINTS)
        caps = [pb.PluginCapability(service=pb.PluginCapability.Service(type=k)) for k in kinds]
        if self.cfg.expansion:
            online = pb.PluginCapability.VolumeExpansion(type=pb.PluginCapability.VolumeExpansion.ONLINE)
            caps.append(pb.PluginCapability(volume_expansion=online))
        return pb.GetPluginCapabilitiesResponse(capabilities=caps)

    def Probe(self, request, context):
        return pb.ProbeResponse()

    # Controller
    def ControllerGetCapabilities(self, request, context):
        rpc = pb.ControllerServiceCapability.RPC
        kinds = [rpc.CREATE_DELETE_VOLUME] + (
            [rpc.PUBLISH_UNPUBLISH_VOLUME] if self.cfg.attach_required else []
        )
        if self.cfg.expansion:
            kinds.append(rpc.EXPAND_VOLUME)
        if self.cfg.get_capacity:
            kinds.append(rpc.GET_CAPACITY)
        return pb.ControllerGetCapabilitiesResponse(
            capabilities=[pb.ControllerServiceCapability(rpc=rpc(type=k)) for k in kinds]
        )

    def CreateVolume(self, request, context):
        self.log.write("CreateVolume", request)
        if not request.volume_capabilities:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume capabilities missing in request")
        self._check_size(request.capacity_range, context)
        folder = self._volume(request.name, context)
        size = request.capacity_range.required_bytes
        with self._space:
            if not self.pools.has(request.name):  # a retried call finds its volume made
                kind = self._pool_for(request.parameters.get(KIND, ""), size, context)
                self.pools.record(request.name, size, kind)
            folder.mkdir(exist_ok=True)
        volume = pb.Volume(
            volume_id=request.name,
            capacity_bytes=request.capacity_range.required_bytes,
            volume_context={"backing": str(folder)},
        )
        if self.cfg.topology_key:
            volume.accessible_topology.append(pb.Topology(segments={self.cfg.topology_key: self.cfg.node_id}))
        return pb.CreateVolumeResponse(volume=volume)

    def DeleteVolume(self, request, context):
        self.log.write("DeleteVolume", request)
        with self._space:
            shutil.rmtree(self._volume(request.volume_id, context), ignore_errors=True)
            self.pools.forget(request.volume_id)
        return pb.DeleteVolumeResponse()

    def _pool_for(self, kind: str, size: int, context) -> str:
        """The pool a new volume of `size` bytes takes its space from (csi-driver-host-path's checks and
        texts); aborts when it has no room."""
        self._check_kind(kind, context)
        if not self.pools.enabled:
            return ""
        if not kind and "" not in self.pools.totals:  # no pool of its own: any with room
            chosen = self.pools.kind_with_room(size)
            if chosen is None:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"requested capacity {size} of arbitrary storage exceeds all remaining capacity",
                )
            kind = chosen
        used, total = self.pools.used(kind), self.pools.totals[kind]
        if used + size > total:
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f'requested capacity {size} exceeds remaining capacity for "{kind}", '
                f"{binary(used)} out of {binary(total)} already used",
            )
        return kind

    def _check_kind(self, kind: str, context) -> None:
        """A `kind` parameter must name a pool."""
        if kind and not self.pools.enabled:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f'capacity tracking disabled, specifying kind "{kind}" is invalid',
            )
        if kind and kind not in self.pools.totals:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f'storage kind "{kind}" is not configured')

    def _own_segment(self) -> dict[str, str]:
        return {self.cfg.topology_key: self.cfg.node_id} if self.cfg.topology_key else {}

    def GetCapacity(self, request, context):
        """What is left of the pool the parameters' kind names (the largest volume size when no pools
        are simulated); nothing in a topology segment other than the driver's own."""
        self.log.write("GetCapacity", request)
        if not self.cfg.get_capacity:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "GetCapacity is not supported")
        kind = request.parameters.get(KIND, "")
        self._check_kind(kind, context)
        with self._space:
            available = self.pools.available(kind) if self.pools.enabled else self.cfg.max_volume_size
        own = self._own_segment()
        if any(own.get(k) != v for k, v in request.accessible_topology.segments.items()):
            available = 0
        return pb.GetCapacityResponse(
            available_capacity=available,
            maximum_volume_size=Int64Value(value=min(self.cfg.max_volume_size, available)),
            minimum_volume_size=Int64Value(value=0),
        )

    def ControllerPublishVolume(self, request, context):
        self.log.write("ControllerPublishVolume", request)
        if not self._volume(request.volume_id, context).is_dir():
            context.abort(grpc.StatusCode.NOT_FOUND, f"volume {request.volume_id} not found")
        (self.cfg.state_dir / "attachments" / f"{request.volume_id}@{request.node_id}").touch()
        return pb.ControllerPublishVolumeResponse(publish_context={"attachedTo": request.node_id})

    def ControllerUnpublishVolume(self, request, context):
        self.log.write("ControllerUnpublishVolume", request)
        (self.cfg.state_dir / "attachments" / f"{request.volume_id}@{request.node_id}").unlink(
            missing_ok=True
        )
        return pb.ControllerUnpublishVolumeResponse()

    def ControllerExpandVolume(self, request, context):
        """A folder has no size to grow: the new capacity is recorded and the node is asked to finish
        (node_expansion_required), as a block-backed driver asks for the file system's resize."""
        self.log.write("ControllerExpandVolume", request)
        if not self.cfg.expansion:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "ControllerExpandVolume is not supported")
        if not self._volume(request.volume_id, context).is_dir():
            context.abort(grpc.StatusCode.NOT_FOUND, f"volume {request.volume_id} not found")
        self._check_size(request.capacity_range, context)
        with self._space:
            self.pools.resize(request.volume_id, request.capacity_range.required_bytes)
        return pb.ControllerExpandVolumeResponse(
            capacity_bytes=request.capacity_range.required_bytes, node_expansion_required=True
        )

    # Node
    def NodeExpandVolume(self, request, context):
        self.log.write("NodeExpandVolume", request)
        if not self.cfg.expansion:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "NodeExpandVolume is not supported")
        self._volume(request.volume_id, context)
        if not request.volume_path or not os.path.isdir(request.volume_path):
            context.abort(grpc.StatusCode.NOT_FOUND, f"volume path {request.volume_path!r} not found")
        return pb.NodeExpandVolumeResponse(capacity_bytes=request.capacity_range.required_bytes)

    def NodeGetCapabilities(self, request, context):
        rpc = pb.NodeServiceCapability.RPC
        kinds = [rpc.STAGE_UNSTAGE_VOLUME, rpc.GET_VOLUME_STATS] + (
            [rpc.EXPAND_VOLUME] if self.cfg.expansion else []
        )
        if self.cfg.mount_group:
            kinds.append(rpc.VOLUME_MOUNT_GROUP)
        return pb.NodeGetCapabilitiesResponse(
            capabilities=[pb.NodeServiceCapability(rpc=rpc(type=k)) for k in kinds]
        )

    def NodeGetInfo(self, request, context):
        self.log.write("NodeGetInfo", request)
        info = pb.NodeGetInfoResponse(node_id=self.cfg.node_id, max_volumes_per_node=self.cfg.max_volumes)
        if self.cfg.topology_key:
            info.accessible_topology.segments[self.cfg.topology_key] = self.cfg.node_id
        return info

    def NodeStageVolume(self, request, context):
        self.log.write("NodeStageVolume", request)
        if not request.staging_target_path:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "staging target path missing in request")
        folder = self._volume(request.volume_id, context)
        if not folder.is_dir():
            context.abort(grpc.StatusCode.NOT_FOUND, f"volume {request.volume_id} not found")
        self._slow(self.cfg.stage_delay, request.staging_target_path, context)
        bind(str(folder), request.staging_target_path)
        self._mount_group(request.volume_capability, request.staging_target_path, context)
        return pb.NodeStageVolumeResponse()

    def NodeUnstageVolume(self, request, context):
        self.log.write("NodeUnstageVolume", request)
        unbind(request.staging_target_path)
        return pb.NodeUnstageVolumeResponse()

    def NodePublishVolume(self, request, context):
        self.log.write("NodePublishVolume", request)
        self._slow(self.cfg.publish_delay, request.target_path, context)
        if not request.target_path:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "target path missing in request")
        folder = self._volume(request.volume_id, context)
        if request.volume_context.get(EPHEMERAL) == "true":
            folder.mkdir(exist_ok=True)
            (self.cfg.state_dir / "ephemeral" / request.volume_id).touch()
            source = str(folder)
        elif request.staging_target_path:
            source = request.staging_target_path
        else:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "volume is not staged")
        bind(source, request.target_path, request.readonly)
        if not request.readonly:
            self._mount_group(request.volume_capability, request.target_path, context)
        return pb.NodePublishVolumeResponse()

    def _slow(self, delay: float, path: str, context) -> None:
        """Wait `delay` seconds before mounting at `path` when it is not mounted yet (a retried call
        finds the first one's mount and returns at once); past the caller's deadline mount nothing it
        no longer expects, unless the driver finishes late."""
        if not delay or (path and is_mount_point(path)):
            return
        time.sleep(delay)
        if not context.is_active() and not self.cfg.finish_late:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the caller's deadline passed")

    def _mount_group(self, cap: pb.VolumeCapability, path: str, context) -> None:
        group = cap.mount.volume_mount_group
        if not group:
            return
        if not self.cfg.mount_group:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume_mount_group is not supported")
        if not group.isdigit():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"invalid volume_mount_group {group!r}")
        os.chown(path, -1, int(group))
        os.chmod(path, os.stat(path).st_mode & 0o7777 | 0o2070)

    def NodeUnpublishVolume(self, request, context):
        self.log.write("NodeUnpublishVolume", request)
        unbind(request.target_path)
        folder = self._volume(request.volume_id, context)
        marker = self.cfg.state_dir / "ephemeral" / request.volume_id
        if marker.exists():  # an ephemeral inline volume lives as long as its one publication
            shutil.rmtree(folder, ignore_errors=True)
            marker.unlink()
        return pb.NodeUnpublishVolumeResponse()

    def NodeGetVolumeStats(self, request, context):
        self.log.write("NodeGetVolumeStats", request)
        if not os.path.isdir(request.volume_path):
            context.abort(grpc.StatusCode.NOT_FOUND, f"path {request.volume_path} does not exist")
        st = os.statvfs(request.volume_path)
        total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        usage = [
            pb.VolumeUsage(unit=pb.VolumeUsage.BYTES, total=total, available=free, used=total - free),
            pb.VolumeUsage(
                unit=pb.VolumeUsage.INODES,
                total=st.f_files,
                available=st.f_favail,
                used=st.f_files - st.f_ffree,
            ),
        ]
        return pb.NodeGetVolumeStatsResponse(usage=usage)


class Registrar(reg_grpc.RegistrationServicer):
    """node-driver-registrar's side of the kubelet's plugin registration handshake."""

    def __init__(self, cfg: DriverConfig, endpoint: str) -> None:
        self.cfg = cfg
        self.endpoint = endpoint
        self.log = CallLog(cfg.call_log)
        self.status: reg.RegistrationStatus | None = None
        self.notified = threading.Event()

    def GetInfo(self, request, context):
        self.log.write("GetInfo", request)
        return reg.PluginInfo(
            type="CSIPlugin", name=self.cfg.name, endpoint=self.endpoint, supported_versions=["1.0.0"]
        )

    def NotifyRegistrationStatus(self, request, context):
        self.log.write("NotifyRegistrationStatus", request)
        self.status = request
        self.notified.set()
        return reg.RegistrationStatusResponse()
