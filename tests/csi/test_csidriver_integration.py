"""The host-path CSI driver as a process, driven through the project's CSI client (kubeclient.csi): the
registration handshake on its plugins_registry socket, NodeGetInfo, and a volume's whole life with real
bind mounts (created, staged, published read-write and read-only, written through the publication and
seen in the backing folder, unpublished, unstaged, deleted), nothing left mounted; an ephemeral inline
volume goes with its publication; bad requests get the CSI error codes; GetCapacity reports what is
left of a `--capacity` pool in the driver's own topology segment, CreateVolume takes from it (and refuses
a volume it has no room for), expansion and deletion change it, a restarted driver still counts it."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kubeclient.csi.client import (
    Capacity,
    CSICallError,
    CSIClient,
    capability,
    notify_registration,
    registration_info,
)
from kubeclient.csi.pb import csi_pb2 as pb
from pykubelet.csidriver.mounts import is_mount_point
from tests.csi.conftest import mounts_under, start_driver

pytestmark = pytest.mark.integration
RWO = pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
TOPOLOGY = "topology.hostpath.csi.pykubelet.io/node"
MI, GI, TI = 1 << 20, 1 << 30, 1 << 40


async def test_registration_handshake(csi_driver):
    socket = next(csi_driver.registration_dir.glob("*-reg.sock"))
    assert socket.name == "hostpath.csi.pykubelet.io-reg.sock"
    info = await registration_info(str(socket))
    assert (info.type, info.name, info.endpoint, info.versions) == (
        "CSIPlugin",
        "hostpath.csi.pykubelet.io",
        csi_driver.endpoint,
        ("1.0.0",),
    )
    await notify_registration(str(socket), True)
    await notify_registration(str(socket), False, "driver name taken")
    assert csi_driver.calls("NotifyRegistrationStatus") == [
        {"plugin_registered": True},
        {"error": "driver name taken"},
    ]


async def test_node_info_and_capabilities(csi_driver):
    client = CSIClient(csi_driver.endpoint)
    try:
        assert await client.plugin_name() == "hostpath.csi.pykubelet.io"
        info = await client.node_info()
        assert (info.node_id, info.max_volumes, info.topology) == (
            "node-a",
            7,
            {"topology.hostpath.csi.pykubelet.io/node": "node-a"},
        )
        rpc = pb.NodeServiceCapability.RPC
        assert await client.node_capabilities() == {
            rpc.STAGE_UNSTAGE_VOLUME,
            rpc.GET_VOLUME_STATS,
            rpc.EXPAND_VOLUME,
        }
        ctrl = pb.ControllerServiceCapability.RPC
        assert await client.controller_capabilities() == {
            ctrl.CREATE_DELETE_VOLUME,
            ctrl.EXPAND_VOLUME,
            ctrl.GET_CAPACITY,
        }
    finally:
        await client.close()


async def test_volume_life_with_real_mounts(csi_driver, tmp_path: Path):
    client = CSIClient(csi_driver.endpoint)
    cap = capability("ext4", ["noatime"], RWO)
    staging, rw, ro = (str(tmp_path / "k" / n) for n in ("globalmount", "pod-a", "pod-b"))
    try:
        volume = await client.create_volume("pvc-1", 1 << 20, [cap], {"p": "v"}, {"token": "hidden"})
        assert (volume.volume_id, volume.capacity_bytes) == ("pvc-1", 1 << 20)
        backing = csi_driver.state_dir / "volumes" / "pvc-1"
        assert backing.is_dir()
        await client.stage("pvc-1", staging, cap, {}, {"backing": str(backing)}, {"s": "x"})
        await client.publish("pvc-1", staging, rw, cap, False, {}, {"k": "v"}, {})
        await client.publish("pvc-1", staging, ro, cap, True, {}, {}, {})
        assert is_mount_point(staging) and is_mount_point(rw) and is_mount_point(ro)
        Path(rw, "data.txt").write_text("written through the publication")
        assert (backing / "data.txt").read_text() == "written through the publication"
        assert Path(ro, "data.txt").read_text() == "written through the publication"
        with pytest.raises(OSError):
            Path(ro, "other").write_text("no")
        usage = await client.volume_stats("pvc-1", rw)
        assert usage.total > 0 and usage.inodes > 0
        publish = csi_driver.calls("NodePublishVolume")[0]
        assert publish["volume_capability"]["mount"] == {"fs_type": "ext4", "mount_flags": ["noatime"]}
        assert publish["volume_context"] == {"k": "v"}
        for target in (rw, ro):
            await client.unpublish("pvc-1", target)
        await client.unstage("pvc-1", staging)
        assert mounts_under(tmp_path / "k") == []
        assert not Path(rw).exists() and not Path(staging).exists()
        await client.delete_volume("pvc-1", {})
        assert not backing.exists()
        assert all(
            "secrets" not in c for c in csi_driver.calls("CreateVolume") + csi_driver.calls("NodeStageVolume")
        )
    finally:
        await client.close()


async def test_ephemeral_inline_volume_goes_with_its_publication(csi_driver, tmp_path: Path):
    client = CSIClient(csi_driver.endpoint)
    target = str(tmp_path / "pod" / "mount")
    try:
        context = {"csi.storage.k8s.io/ephemeral": "true", "csi.storage.k8s.io/pod.name": "p"}
        await client.publish("csi-abc", "", target, capability("", [], RWO), False, {}, context, {})
        assert is_mount_point(target)
        await client.unpublish("csi-abc", target)
        assert not (csi_driver.state_dir / "volumes" / "csi-abc").exists()
        assert mounts_under(tmp_path / "pod") == []
    finally:
        await client.close()


async def test_bad_requests_get_csi_error_codes(csi_driver, tmp_path: Path):
    client = CSIClient(csi_driver.endpoint)
    cap = capability("", [], RWO)
    try:
        with pytest.raises(CSICallError) as err:
            await client.stage("missing", str(tmp_path / "s"), cap, {}, {}, {})
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        assert str(err.value) == "rpc error: code = NotFound desc = volume missing not found"
        with pytest.raises(CSICallError) as err:
            await client.create_volume("../escape", 0, [cap], {}, {})
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(CSICallError) as err:
            await client.publish("pvc-x", "", str(tmp_path / "t"), cap, False, {}, {}, {})
        assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await client.close()


async def test_expansion_controller_then_node(csi_driver, tmp_path: Path):
    """ControllerExpandVolume takes the size and asks for the node's part (past 1 TiB: OUT_OF_RANGE);
    NodeExpandVolume needs the published path; a volume that does not exist is NOT_FOUND."""
    client = CSIClient(csi_driver.endpoint)
    cap = capability("", [], RWO)
    try:
        await client.create_volume("pvc-grow", 8 << 20, [cap], {}, {})
        assert await client.controller_expand("pvc-grow", 16 << 20, cap, {}) == (16 << 20, True)
        path = tmp_path / "published"
        path.mkdir()
        assert await client.node_expand("pvc-grow", str(path), "", 16 << 20, cap, {}) == 16 << 20
        assert csi_driver.calls("NodeExpandVolume")[-1]["volume_path"] == str(path)
        with pytest.raises(CSICallError) as err:
            await client.controller_expand("pvc-grow", 2 << 40, cap, {})  # past the driver's 1 TiB
        assert err.value.code == grpc.StatusCode.OUT_OF_RANGE
        with pytest.raises(CSICallError) as err:
            await client.controller_expand("missing", 1, cap, {})
        assert err.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(CSICallError) as err:
            await client.node_expand("pvc-grow", str(tmp_path / "nowhere"), "", 1, cap, {})
        assert err.value.code == grpc.StatusCode.NOT_FOUND
    finally:
        await client.close()


async def test_no_socket_is_unavailable(tmp_path: Path):
    client = CSIClient(str(tmp_path / "none.sock"))
    try:
        with pytest.raises(CSICallError) as err:
            await client.node_info()
        assert err.value.code == grpc.StatusCode.UNAVAILABLE
    finally:
        await client.close()


async def test_capacity_pools_in_the_driver_segment(short_dir: Path):
    pools = ("--topology-key", TOPOLOGY, "--capacity", "1Gi", "--capacity", "fast=2Gi")
    driver = start_driver(short_dir, *pools)
    client = CSIClient(driver.endpoint)
    cap, own = capability("", [], RWO), {TOPOLOGY: "node-a"}
    try:
        assert await client.get_capacity({}, own) == Capacity(GI, GI, 0)
        assert await client.get_capacity({"kind": "fast"}, own) == Capacity(2 * GI, 2 * GI, 0)
        assert await client.get_capacity({}, None) == Capacity(GI, GI, 0)  # no topology asked: the pool
        assert await client.get_capacity({}, {}) == Capacity(GI, GI, 0)  # the empty segment: every node
        assert await client.get_capacity({}, {TOPOLOGY: "node-b"}) == Capacity(0, 0, 0)  # not its node

        await client.create_volume("v1", 256 * MI, [cap], {}, {})
        await client.create_volume("v2", GI, [cap], {"kind": "fast"}, {})
        await client.create_volume("v1", 256 * MI, [cap], {}, {})  # retried: takes nothing more
        assert await client.get_capacity({}, own) == Capacity(768 * MI, 768 * MI, 0)
        assert (await client.get_capacity({"kind": "fast"}, own)).available == GI
        with pytest.raises(CSICallError) as err:
            await client.create_volume("v3", GI, [cap], {}, {})
        assert err.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details == (
            f'requested capacity {GI} exceeds remaining capacity for "", 256Mi out of 1Gi already used'
        )
        assert not (driver.state_dir / "volumes" / "v3").exists()
        await client.controller_expand("v1", 512 * MI, cap, {})
        assert (await client.get_capacity({}, own)).available == 512 * MI

        driver.stop()  # a restarted driver counts the volumes it made before
        driver = start_driver(short_dir, *pools)
        assert (await client.get_capacity({}, own)).available == 512 * MI
        await client.delete_volume("v1", {})
        assert (await client.get_capacity({}, own)).available == GI

        with pytest.raises(CSICallError) as err:
            await client.get_capacity({"kind": "nope"}, own)
        assert (err.value.code, err.value.details) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            'storage kind "nope" is not configured',
        )
        asked = driver.calls("GetCapacity")[-1]
        assert asked == {
            "volume_capabilities": [{"mount": {}, "access_mode": {}}],
            "parameters": {"kind": "nope"},
            "accessible_topology": {"segments": own},
        }
    finally:
        await client.close()
        driver.stop()


async def test_capacity_without_pools_and_switched_off(csi_driver, short_dir: Path):
    """Without --capacity the largest volume size is reported and a `kind` is refused (as
    csi-driver-host-path); --no-capacity takes GET_CAPACITY away."""
    client = CSIClient(csi_driver.endpoint)
    try:
        assert await client.get_capacity({}, {TOPOLOGY: "node-a"}) == Capacity(TI, TI, 0)
        with pytest.raises(CSICallError) as err:
            await client.get_capacity({"kind": "fast"}, None)
        assert err.value.details == 'capacity tracking disabled, specifying kind "fast" is invalid'
    finally:
        await client.close()
    off = start_driver(short_dir / "off", "--no-capacity")
    client = CSIClient(off.endpoint)
    try:
        rpc = pb.ControllerServiceCapability.RPC
        assert rpc.GET_CAPACITY not in await client.controller_capabilities()
        with pytest.raises(CSICallError) as err:
            await client.get_capacity({}, None)
        assert err.value.code == grpc.StatusCode.UNIMPLEMENTED
    finally:
        await client.close()
        off.stop()
