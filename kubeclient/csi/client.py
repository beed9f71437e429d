"""An asyncio client for a CSI v1 driver's socket and for a plugin's registration socket.

One grpc.aio channel per socket; every call has a deadline (upstream's csi client gives node calls 15 s
for publish and stage, 2 min for provisioning calls made by the sidecars), and failures come out as
`CSICallError` carrying the gRPC status code and the driver's message, which the callers turn into
upstream's event texts.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc

from kubeclient.csi.pb import csi_pb2 as pb
from kubeclient.csi.pb import csi_pb2_grpc as pb_grpc
from kubeclient.csi.pb import registration_pb2 as reg
from kubeclient.csi.pb import registration_pb2_grpc as reg_grpc

# A PersistentVolume access mode as a CSI access mode (upstream's csi translation of the API's modes).
ACCESS_MODES = {
    "ReadWriteOnce": pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER,
    "ReadOnlyMany": pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY,
    "ReadWriteMany": pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER,
    "ReadWriteOncePod": pb.VolumeCapability.AccessMode.SINGLE_NODE_SINGLE_WRITER,
}
NODE_TIMEOUT = 15.0  # upstream's csiTimeout for the node calls
CONTROLLER_TIMEOUT = 120.0
INFO_TIMEOUT = 10.0
CAPACITY_TIMEOUT = 10.0  # external-provisioner's --timeout, which bounds its GetCapacity calls


class CSICallError(Exception):
    """A driver call failed: `code` is the gRPC status (a missing socket is UNAVAILABLE)."""

    def __init__(self, method: str, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"rpc error: code = {_code_name(code)} desc = {message}")
        self.method = method
        self.code = code
        self.details = message


def _code_name(code: grpc.StatusCode) -> str:
    # Go's codes.Code.String(): Unavailable, DeadlineExceeded, ... (the name in CamelCase)
    return "".join(part.capitalize() for part in code.name.split("_"))


MAX_SOCKET_PATH = 100  # a unix socket's address holds 107 bytes; gRPC wants some of them
_DIRS: dict[str, int] = {}  # folder -> an fd of it held open, for socket paths too long to name


def socket_address(path: str) -> str:
    """gRPC's address of the unix socket `path`; one whose path is too long for a socket address is
    reached through its folder's descriptor (/proc/self/fd/N/name), held open for the process's life
    (the kubelet's plugin folder under a deep root dir, as in tests, has such paths)."""
    if len(os.fsencode(path)) < MAX_SOCKET_PATH:
        return f"unix://{path}"
    folder, name = os.path.split(os.path.abspath(path))
    if folder not in _DIRS:
        _DIRS[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"unix:///proc/self/fd/{_DIRS[folder]}/{name}"


def _channel(socket: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(socket_address(socket))


async def _call(method_name: str, method, request, deadline: float):
    try:
        return await method(request, timeout=deadline)  # the gRPC deadline, sent to the driver
    except grpc.aio.AioRpcError as err:
        details = err.details() or ""
        if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED and details == "Deadline Exceeded":
            details = "context deadline exceeded"  # our deadline ran out: Go's text, as upstream's reads
        raise CSICallError(method_name, err.code(), details) from None


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    max_volumes: int
    topology: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Capacity:
    """GetCapacityResponse: the bytes available, and the largest and smallest volume when the driver
    says (None: the wrapper field was not set)."""

    available: int
    maximum_volume_size: int | None = None
    minimum_volume_size: int | None = None


@dataclass(frozen=True)
class Usage:
    total: int
    used: int
    available: int
    inodes: int = 0
    inodes_used: int = 0
    inodes_free: int = 0


def attachment_name(handle: str, driver: str, node: str) -> str:
    """The VolumeAttachment of a volume on a node (upstream's getAttachmentName): csi-<sha256 of the
    handle, the driver and the node>, shared by the attach/detach controller and the node."""
    return "csi-" + hashlib.sha256(f"{handle}{driver}{node}".encode()).hexdigest()


def capability(
    fs_type: str, mount_flags: list[str], access_mode: int, block: bool = False, mount_group: str = ""
):
    """A VolumeCapability: mount (with fsType, flags and the volume_mount_group the driver is to mount
    with, the pod's fsGroup as decimal text) or block, and its access mode."""
    mode = pb.VolumeCapability.AccessMode(mode=access_mode)
    if block:
        return pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(), access_mode=mode)
    mount = pb.VolumeCapability.MountVolume(
        fs_type=fs_type, mount_flags=mount_flags, volume_mount_group=mount_group
    )
    return pb.VolumeCapability(mount=mount, access_mode=mode)


class CSIClient:
    """The Identity, Node and Controller services of one driver socket."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self._channel = _channel(socket)
        self._identity = pb_grpc.IdentityStub(self._channel)
        self._node = pb_grpc.NodeStub(self._channel)
        self._controller = pb_grpc.ControllerStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def plugin_name(self) -> str:
        got = await _call(
            "GetPluginInfo", self._identity.GetPluginInfo, pb.GetPluginInfoRequest(), INFO_TIMEOUT
        )
        return got.name

    async def node_info(self) -> NodeInfo:
        got = await _call("NodeGetInfo", self._node.NodeGetInfo, pb.NodeGetInfoRequest(), INFO_TIMEOUT)
        return NodeInfo(got.node_id, got.max_volumes_per_node, dict(got.accessible_topology.segments))

    async def node_capabilities(self) -> set[int]:
        got = await _call(
            "NodeGetCapabilities",
            self._node.NodeGetCapabilities,
            pb.NodeGetCapabilitiesRequest(),
            INFO_TIMEOUT,
        )
        return {c.rpc.type for c in got.capabilities}

    async def controller_capabilities(self) -> set[int]:
        got = await _call(
            "ControllerGetCapabilities",
            self._controller.ControllerGetCapabilities,
            pb.ControllerGetCapabilitiesRequest(),
            INFO_TIMEOUT,
        )
        return {c.rpc.type for c in got.capabilities}

    async def stage(
        self,
        volume_id: str,
        staging_path: str,
        cap: pb.VolumeCapability,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
        secrets: Mapping[str, str],
    ) -> None:
        request = pb.NodeStageVolumeRequest(
            volume_id=volume_id,
            publish_context=dict(publish_context),
            staging_target_path=staging_path,
            volume_capability=cap,
            secrets=dict(secrets),
            volume_context=dict(volume_context),
        )
        await _call("NodeStageVolume", self._node.NodeStageVolume, request, NODE_TIMEOUT)

    async def unstage(self, volume_id: str, staging_path: str) -> None:
        request = pb.NodeUnstageVolumeRequest(volume_id=volume_id, staging_target_path=staging_path)
        await _call("NodeUnstageVolume", self._node.NodeUnstageVolume, request, NODE_TIMEOUT)

    async def publish(
        self,
        volume_id: str,
        staging_path: str,
        target_path: str,
        cap: pb.VolumeCapability,
        read_only: bool,
        publish_context: Mapping[str, str],
        volume_context: Mapping[str, str],
        secrets: Mapping[str, str],
    ) -> None:
        request = pb.NodePublishVolumeRequest(
            volume_id=volume_id,
            publish_context=dict(publish_context),
            staging_target_path=staging_path,
            target_path=target_path,
            volume_capability=cap,
            readonly=read_only,
            secrets=dict(secrets),
            volume_context=dict(volume_context),
        )
        await _call("NodePublishVolume", self._node.NodePublishVolume, request, NODE_TIMEOUT)

    async def unpublish(self, volume_id: str, target_path: str) -> None:
        request = pb.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target_path)
        await _call("NodeUnpublishVolume", self._node.NodeUnpublishVolume, request, NODE_TIMEOUT)

    async def volume_stats(self, volume_id: str, path: str, staging_path: str = "") -> Usage:
        request = pb.NodeGetVolumeStatsRequest(
            volume_id=volume_id, volume_path=path, staging_target_path=staging_path
        )
        got = await _call("NodeGetVolumeStats", self._node.NodeGetVolumeStats, request, NODE_TIMEOUT)
        by_unit = {u.unit: u for u in got.usage}
        b = by_unit.get(pb.VolumeUsage.BYTES) or pb.VolumeUsage()
        i = by_unit.get(pb.VolumeUsage.INODES) or pb.VolumeUsage()
        return Usage(b.total, b.used, b.available, i.total, i.used, i.available)

    async def node_expand(
        self,
        volume_id: str,
        path: str,
        staging_path: str,
        required_bytes: int,
        cap: pb.VolumeCapability,
        secrets: Mapping[str, str],
    ) -> int:
        """NodeExpandVolume; the capacity the driver reports (0: it does not say)."""
        request = pb.NodeExpandVolumeRequest(
            volume_id=volume_id,
            volume_path=path,
            capacity_range=pb.CapacityRange(required_bytes=required_bytes),
            staging_target_path=staging_path,
            volume_capability=cap,
            secrets=dict(secrets),
        )
        got = await _call("NodeExpandVolume", self._node.NodeExpandVolume, request, NODE_TIMEOUT)
        return got.capacity_bytes

    async def controller_expand(
        self, volume_id: str, required_bytes: int, cap: pb.VolumeCapability, secrets: Mapping[str, str]
    ) -> tuple[int, bool]:
        """ControllerExpandVolume: the new capacity and whether the node must finish the expansion."""
        request = pb.ControllerExpandVolumeRequest(
            volume_id=volume_id,
            capacity_range=pb.CapacityRange(required_bytes=required_bytes),
            secrets=dict(secrets),
            volume_capability=cap,
        )
        got = await _call(
            "ControllerExpandVolume", self._controller.ControllerExpandVolume, request, CONTROLLER_TIMEOUT
        )
        return got.capacity_bytes, got.node_expansion_required

    async def create_volume(
        self,
        name: str,
        required_bytes: int,
        caps: list[pb.VolumeCapability],
        parameters: Mapping[str, str],
        secrets: Mapping[str, str],
        requisite: list[dict[str, str]] | None = None,
        preferred: list[dict[str, str]] | None = None,
    ) -> pb.Volume:
        request = pb.CreateVolumeRequest(
            name=name,
            capacity_range=pb.CapacityRange(required_bytes=required_bytes),
            volume_capabilities=caps,
            parameters=dict(parameters),
            secrets=dict(secrets),
        )
        if requisite or preferred:
            request.accessibility_requirements.CopyFrom(
                pb.TopologyRequirement(
                    requisite=[pb.Topology(segments=t) for t in requisite or []],
                    preferred=[pb.Topology(segments=t) for t in preferred or []],
                )
            )
        got = await _call("CreateVolume", self._controller.CreateVolume, request, CONTROLLER_TIMEOUT)
        return got.volume

    async def get_capacity(
        self, parameters: Mapping[str, str], segment: Mapping[str, str] | None
    ) -> Capacity:
        """GetCapacity for a class's parameters in a topology segment (None: no topology), asked as
        external-provisioner asks: one mount capability of access mode UNKNOWN, the capacity being taken
        as independent of the capabilities."""
        cap = pb.VolumeCapability(
            mount=pb.VolumeCapability.MountVolume(),
            access_mode=pb.VolumeCapability.AccessMode(mode=pb.VolumeCapability.AccessMode.UNKNOWN),
        )
        request = pb.GetCapacityRequest(volume_capabilities=[cap], parameters=dict(parameters))
        if segment is not None:
            request.accessible_topology.CopyFrom(pb.Topology(segments=dict(segment)))
        got = await _call("GetCapacity", self._controller.GetCapacity, request, CAPACITY_TIMEOUT)
        return Capacity(
            got.available_capacity,
            got.maximum_volume_size.value if got.HasField("maximum_volume_size") else None,
            got.minimum_volume_size.value if got.HasField("minimum_volume_size") else None,
        )

    async def delete_volume(self, volume_id: str, secrets: Mapping[str, str]) -> None:
        request = pb.DeleteVolumeRequest(volume_id=volume_id, secrets=dict(secrets))
        await _call("DeleteVolume", self._controller.DeleteVolume, request, CONTROLLER_TIMEOUT)

    async def controller_publish(
        self,
        volume_id: str,
        node_id: str,
        cap: pb.VolumeCapability,
        read_only: bool,
        volume_context: Mapping[str, str],
    ) -> dict[str, str]:
        request = pb.ControllerPublishVolumeRequest(
            volume_id=volume_id,
            node_id=node_id,
            volume_capability=cap,
            readonly=read_only,
            volume_context=dict(volume_context),
        )
        got = await _call(
            "ControllerPublishVolume", self._controller.ControllerPublishVolume, request, CONTROLLER_TIMEOUT
        )
        return dict(got.publish_context)

    async def controller_unpublish(self, volume_id: str, node_id: str) -> None:
        request = pb.ControllerUnpublishVolumeRequest(volume_id=volume_id, node_id=node_id)
        await _call(
            "ControllerUnpublishVolume",
            self._controller.ControllerUnpublishVolume,
            request,
            CONTROLLER_TIMEOUT,
        )


@dataclass(frozen=True)
class PluginInfo:
    type: str
    name: str
    endpoint: str
    versions: tuple[str, ...]


async def registration_info(socket: str) -> PluginInfo:
    """GetInfo on a plugin's registration socket."""
    async with _channel(socket) as channel:
        got = await _call(
            "GetInfo", reg_grpc.RegistrationStub(channel).GetInfo, reg.InfoRequest(), INFO_TIMEOUT
        )
    return PluginInfo(got.type, got.name, got.endpoint, tuple(got.supported_versions))


async def notify_registration(socket: str, registered: bool, error: str = "") -> None:
    """NotifyRegistrationStatus: tell the plugin whether the kubelet took it."""
    async with _channel(socket) as channel:
        stub = reg_grpc.RegistrationStub(channel)
        status = reg.RegistrationStatus(plugin_registered=registered, error=error)
        await _call("NotifyRegistrationStatus", stub.NotifyRegistrationStatus, status, INFO_TIMEOUT)
