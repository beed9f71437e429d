"""The node side of CSI with the host-path driver running as a process and real mounts: the agent's
plugin watcher sees its registration socket, does the GetInfo / NotifyRegistrationStatus handshake and
NodeGetInfo, hands the driver on for the CSINode entry, deregisters it when the socket goes; the volume
manager (CSI plugin in its table) stages a claim's CSI volume once for two pods, publishes it per pod
with the pod's info, read-only where asked, waits for the VolumeAttachment where the CSIDriver wants one,
publishes an inline ephemeral volume, and leaves nothing mounted once the pods are taken down; the
pod's fsGroup goes by the fsGroupPolicy, or to a driver with VOLUME_MOUNT_GROUP as volume_mount_group;
a NodeStageVolume or NodePublishVolume that times out is upstream's FailedMount, and its mount, done by
the driver after the agent stopped waiting, is undone when the pod goes; one that fails for good is not.
The API reads are a dict here (the API kinds are tested in the stack test)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

import agent.csi.watcher as w
import kubeclient.csi.client as csiclient
from agent.csi.registry import DriverRegistry, RegisteredDriver
from agent.csi.watcher import PluginWatcher
from agent.volumes import VolumeError, VolumeManager, container_mounts, default_table
from agent.volumes.csi import CSIPlugin
from kubeclient.csi.client import PluginInfo, attachment_name, capability
from kubeclient.csi.pb import csi_pb2 as pb
from tests.csi.conftest import mounts_under, start_driver

pytestmark = pytest.mark.integration
DRIVER = "hostpath.csi.pykubelet.io"


async def until(condition, what: str, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


def pod(uid: str, *volumes: dict, name: str = "p") -> dict:
    """A pod whose container mounts each of `volumes` (a volume no container uses is not set up)."""
    mounts = [{"name": v["name"], "mountPath": f"/v/{v['name']}"} for v in volumes]
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "volumes": list(volumes),
            "serviceAccountName": "sa",
            "containers": [{"name": "c", "volumeMounts": mounts}],
        },
    }


@pytest.fixture
def objects() -> dict:
    return {
        ("CSIDriver", DRIVER): {
            "metadata": {"name": DRIVER},
            "spec": {
                "attachRequired": False,
                "podInfoOnMount": True,
                "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            },
        },
        ("PersistentVolumeClaim", "data"): {
            "metadata": {"name": "data", "namespace": "ns", "uid": "c1"},
            "spec": {"volumeName": "pv-1"},
            "status": {"phase": "Bound"},
        },
        ("PersistentVolume", "pv-1"): {
            "metadata": {"name": "pv-1"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "mountOptions": ["noatime"],
                "claimRef": {"namespace": "ns", "name": "data", "uid": "c1"},
                "csi": {"driver": DRIVER, "volumeHandle": "vol-1", "volumeAttributes": {"tier": "gold"}},
            },
        },
    }


async def test_registration_staging_publishing_and_nothing_left(short_dir: Path, objects: dict):
    root = short_dir / "kubelet"
    driver = start_driver(short_dir / "drv")
    registered: list[RegisteredDriver] = []
    gone: list[str] = []

    async def on_register(d: RegisteredDriver) -> None:
        registered.append(d)

    async def on_deregister(name: str) -> None:
        gone.append(name)

    registry = DriverRegistry()
    # the driver's registration socket lives in its own folder; the agent's watched folder gets a link
    watcher = PluginWatcher(str(driver.registration_dir), registry, on_register, on_deregister)
    task = asyncio.create_task(watcher.run())

    async def fetch(kind, ns, name):
        return objects.get((kind, name))

    csi = CSIPlugin(registry, "node-a")
    manager = VolumeManager(
        str(root), fetch, lambda p, f: "", table=default_table(extra=[csi], claim_sources=[csi])
    )
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    try:
        await until(lambda: registry.get(DRIVER) is not None, "registration")
        await until(lambda: driver.calls("NotifyRegistrationStatus"), "notified")
        assert driver.calls("NotifyRegistrationStatus") == [{"plugin_registered": True}]
        assert registered[0].node.node_id == "node-a" and registered[0].endpoint == driver.endpoint
        rwo = capability("", [], pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER)
        await registered[0].client.create_volume("vol-1", 0, [rwo], {}, {})

        ready_a = await manager.prepare(pod("uid-a", claim, name="a"))
        ro_claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}}
        ready_b = await manager.prepare(pod("uid-b", ro_claim, name="b"))
        await manager.prepare(pod("uid-a", claim, name="a"))  # a second sync changes nothing
        assert len(driver.calls("NodeStageVolume")) == 1
        publishes = driver.calls("NodePublishVolume")
        assert len(publishes) == 2
        stage = driver.calls("NodeStageVolume")[0]
        assert stage["staging_target_path"].startswith(str(root / "plugins/kubernetes.io/csi" / DRIVER))
        assert stage["volume_capability"] == {
            "mount": {"mount_flags": ["noatime"]},
            "access_mode": {"mode": "SINGLE_NODE_WRITER"},
        }
        assert publishes[0]["target_path"] == str(root / "pods/uid-a/volumes/kubernetes.io~csi/pv-1/mount")
        assert publishes[0]["volume_context"] == {
            "tier": "gold",
            "csi.storage.k8s.io/pod.name": "a",
            "csi.storage.k8s.io/pod.namespace": "ns",
            "csi.storage.k8s.io/pod.uid": "uid-a",
            "csi.storage.k8s.io/serviceAccount.name": "sa",
            "csi.storage.k8s.io/ephemeral": "false",
        }
        assert publishes[1].get("readonly") is True and "readonly" not in publishes[0]
        mounts = container_mounts(
            {"name": "c", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}, ready_b
        )
        assert mounts[0].readonly
        Path(ready_a["data"].host_path, "f.txt").write_text("from pod a")
        assert (driver.state_dir / "volumes/vol-1/f.txt").read_text() == "from pod a"

        # NodeGetVolumeStats on the publication, named by the pod's volume, with the claim behind it
        (usage,) = await manager.stats("uid-a")
        fs = os.statvfs(driver.state_dir / "volumes/vol-1")
        assert (usage.name, usage.folder, usage.claim) == ("data", "kubernetes.io~csi/pv-1", ("ns", "data"))
        assert (usage.capacity, usage.inodes) == (fs.f_blocks * fs.f_frsize, fs.f_files)
        assert 0 < usage.used <= usage.capacity and usage.available <= usage.capacity
        assert 0 < usage.inodes_used and usage.inodes_free <= usage.inodes
        stats_call = driver.calls("NodeGetVolumeStats")[-1]
        assert stats_call["volume_path"] == publishes[0]["target_path"]
        assert stats_call["staging_target_path"] == stage["staging_target_path"]
        assert await manager.stats("uid-a") == [usage]  # remembered: asked once per period
        assert len(driver.calls("NodeGetVolumeStats")) == 1

        await manager.teardown("uid-a")
        assert driver.calls("NodeUnstageVolume") == []  # pod b still uses the volume
        await manager.teardown("uid-b")
        assert len(driver.calls("NodeUnpublishVolume")) == 2
        assert len(driver.calls("NodeUnstageVolume")) == 1
        assert mounts_under(root) == []

        # an inline ephemeral volume lives and goes with its pod
        inline = {"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"size": "1"}}}
        ready = await manager.prepare(pod("uid-c", inline, name="c"))
        Path(ready["scratch"].host_path, "x").write_text("x")
        (inline_usage,) = await manager.stats("uid-c")
        assert (inline_usage.name, inline_usage.claim) == ("scratch", None)  # no claim behind it
        assert (
            driver.calls("NodePublishVolume")[-1]["volume_context"]["csi.storage.k8s.io/ephemeral"] == "true"
        )
        await manager.teardown("uid-c")
        assert mounts_under(root) == []
        assert [v.name for v in (driver.state_dir / "volumes").iterdir()] == ["vol-1"]  # the inline one went

        # attachRequired: the pod waits for the VolumeAttachment to say attached, with no FailedMount of
        # the kubelet's (the attach/detach controller reports FailedAttachVolume)
        objects[("CSIDriver", DRIVER)]["spec"]["attachRequired"] = True
        name = attachment_name("vol-1", DRIVER, "node-a")
        stages = len(driver.calls("NodeStageVolume"))
        for attachment in (None, {"attached": False}, {"attached": False, "attachError": {"message": "x"}}):
            if attachment is not None:
                objects[("VolumeAttachment", name)] = {"metadata": {"name": name}, "status": attachment}
            with pytest.raises(VolumeError) as err:
                await manager.prepare(pod("uid-d", claim, name="d"))
            assert err.value.messages == ()
        assert len(driver.calls("NodeStageVolume")) == stages  # nothing staged while it waits
        objects[("VolumeAttachment", name)] = {
            "metadata": {"name": name},
            "status": {"attached": True, "attachmentMetadata": {"lun": "3"}},
        }
        await manager.prepare(pod("uid-d", claim, name="d"))
        assert driver.calls("NodeStageVolume")[-1]["publish_context"] == {"lun": "3"}
        await manager.teardown("uid-d")
        assert mounts_under(root) == []

        driver.stop()  # its sockets go: the driver is deregistered
        await until(lambda: gone == [DRIVER], "deregistration")
        assert registry.get(DRIVER) is None
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-e", claim, name="e"))
        assert err.value.messages == (
            'MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: attacher.MountDevice failed '
            f"to create newCsiDriverClient: driver name {DRIVER} not found in the list of registered CSI drivers",
        )
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-e", inline, name="e"))
        assert err.value.messages == (
            'MountVolume.SetUp failed for volume "scratch" : kubernetes.io/csi: mounter.SetUpAt failed to get '
            f"CSI client: driver name {DRIVER} not found in the list of registered CSI drivers",
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await watcher.close()
        driver.stop()
        for uid in ("uid-a", "uid-b", "uid-c", "uid-d", "uid-e"):
            await manager.teardown(uid)


async def test_a_plugin_that_is_not_csi_is_told_so(short_dir: Path):
    driver = start_driver(short_dir / "drv", "--name", "x")
    registry = DriverRegistry()

    async def nothing(_):
        return None

    watcher = PluginWatcher(str(driver.registration_dir), registry, nothing, nothing)
    try:
        # the same driver, announced under a version this node does not speak: refused and told why
        real = w.registration_info

        async def old_version(socket):
            info = await real(socket)
            return PluginInfo(info.type, info.name, info.endpoint, ("0.3.0",))

        w.registration_info = old_version
        try:
            await watcher.rescan()
        finally:
            w.registration_info = real
        assert registry.get("x") is None
        status = driver.calls("NotifyRegistrationStatus")
        assert status == [
            {
                "error": "RegisterPlugin error -- plugin validation failed with err: rpc error: none of the "
                "versions specified ['0.3.0'] are supported"
            }
        ]
    finally:
        await watcher.close()
        driver.stop()


def _merge(target: dict, patch: dict) -> dict:
    """A JSON merge patch applied in place (None deletes), as the API server applies one."""
    for key, val in patch.items():
        if val is None:
            target.pop(key, None)
        elif isinstance(val, dict) and isinstance(target.get(key), dict):
            _merge(target[key], val)
        else:
            target[key] = val
    return target


async def test_node_expansion_finishes_what_the_resizer_left_pending(short_dir: Path, objects: dict):
    """The PV grown by the resizer past the claim's capacity, the claim NodeResizePending with its
    FileSystemResizePending condition: the pod's next sync calls NodeExpandVolume on the publication
    (NodeResizeInProgress first), records FileSystemResizeSuccessful on the pod and the claim, and sets the
    claim's capacity with the condition and the resize status gone; a sync after that calls nothing."""
    root = short_dir / "kubelet"
    driver = start_driver(short_dir / "drv")
    registry = DriverRegistry()

    async def nothing(_):
        return None

    watcher = PluginWatcher(str(driver.registration_dir), registry, nothing, nothing)
    task = asyncio.create_task(watcher.run())
    patches: list[tuple[str, dict]] = []
    events: list[tuple[str, str, str, str]] = []

    async def fetch(kind, ns, name):
        return objects.get((kind, name))

    async def patch(path: str, body: dict) -> dict:
        patches.append((path, body))
        assert path == "/api/v1/namespaces/ns/persistentvolumeclaims/data/status"
        return _merge(objects[("PersistentVolumeClaim", "data")], body)

    def record(obj, type_, reason, message):
        events.append((obj["metadata"]["name"], type_, reason, message))

    csi = CSIPlugin(registry, "node-a")
    manager = VolumeManager(
        str(root),
        fetch,
        lambda p, f: "",
        table=default_table(extra=[csi], claim_sources=[csi]),
        patch=patch,
        record=record,
    )
    claim_volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    the_pod = pod("uid-x", claim_volume, name="x")
    try:
        await until(lambda: registry.get(DRIVER) is not None, "registration")
        rwo = capability("", [], pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER)
        await registry.get(DRIVER).client.create_volume("vol-1", 0, [rwo], {}, {})
        await manager.prepare(the_pod)
        claim = objects[("PersistentVolumeClaim", "data")]
        claim["status"]["capacity"] = {"storage": "1Gi"}
        objects[("PersistentVolume", "pv-1")]["spec"]["capacity"] = {"storage": "2Gi"}
        await manager.refresh(the_pod)
        assert driver.calls("NodeExpandVolume") == []  # the resizer has not asked the node yet
        claim["status"]["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}
        claim["status"]["conditions"] = [
            {"type": "FileSystemResizePending", "status": "True"},
            {"type": "ModifyingVolume", "status": "True"},
        ]
        await manager.refresh(the_pod)
        (call,) = driver.calls("NodeExpandVolume")
        assert call["volume_path"] == str(root / "pods/uid-x/volumes/kubernetes.io~csi/pv-1/mount")
        assert call["capacity_range"] == {"required_bytes": str(2 << 30)}
        assert call["staging_target_path"].endswith("/globalmount")
        assert patches[0][1] == {"status": {"allocatedResourceStatuses": {"storage": "NodeResizeInProgress"}}}
        assert claim["status"] == {
            "phase": "Bound",
            "capacity": {"storage": "2Gi"},
            "conditions": [{"type": "ModifyingVolume", "status": "True"}],
            "allocatedResourceStatuses": {},
        }
        message = 'MountVolume.NodeExpandVolume succeeded for volume "pv-1" node-a'
        assert events == [
            ("x", "Normal", "FileSystemResizeSuccessful", message),
            ("data", "Normal", "FileSystemResizeSuccessful", message),
        ]
        await manager.refresh(the_pod)
        assert len(driver.calls("NodeExpandVolume")) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await watcher.close()
        await manager.teardown("uid-x")
        driver.stop()
        assert mounts_under(root) == []


@contextlib.asynccontextmanager
async def node_with_volume(short_dir: Path, objects: dict, *flags: str, uids: tuple[str, ...]):
    """The driver (started with `flags`) registered beside a volume manager whose table has CSI, with its
    volume vol-1 made; on the way out the pods `uids` are taken down, the driver stops and nothing stays
    mounted."""
    root = short_dir / "kubelet"
    driver = start_driver(short_dir / "drv", *flags)
    registry = DriverRegistry()

    async def nothing(_):
        return None

    watcher = PluginWatcher(str(driver.registration_dir), registry, nothing, nothing)
    task = asyncio.create_task(watcher.run())

    async def fetch(kind, ns, name):
        return objects.get((kind, name))

    csi = CSIPlugin(registry, "node-a")
    manager = VolumeManager(
        str(root), fetch, lambda p, f: "", table=default_table(extra=[csi], claim_sources=[csi])
    )
    try:
        await until(lambda: registry.get(DRIVER) is not None, "registration")
        rwo = capability("", [], pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER)
        await registry.get(DRIVER).client.create_volume("vol-1", 0, [rwo], {}, {})
        yield driver, manager
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await watcher.close()
        for uid in uids:
            await manager.teardown(uid)
        driver.stop()
        assert mounts_under(root) == []


async def test_fs_group_follows_the_drivers_fs_group_policy(short_dir: Path, objects: dict):
    """The pod's fsGroup on a real publication: left alone with fsGroupPolicy None, applied (group and
    setgid on the volume's folder, seen through the driver's backing folder) with File."""
    claim_volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    async with node_with_volume(short_dir, objects, uids=("uid-n", "uid-f")) as (driver, manager):
        backing = driver.state_dir / "volumes/vol-1"
        for uid, policy, group in (("uid-n", "None", 0), ("uid-f", "File", 4321)):
            objects[("CSIDriver", DRIVER)]["spec"]["fsGroupPolicy"] = policy
            the_pod = pod(uid, claim_volume, name=uid)
            the_pod["spec"]["securityContext"] = {"fsGroup": 4321}
            await manager.prepare(the_pod)
            info = backing.stat()
            assert (info.st_gid, bool(info.st_mode & 0o2000)) == (group, group != 0), policy
            await manager.teardown(uid)


async def test_fs_group_goes_to_a_driver_with_volume_mount_group(short_dir: Path, objects: dict):
    """A driver whose node service has VOLUME_MOUNT_GROUP gets the pod's fsGroup as the capability's
    volume_mount_group in NodeStageVolume and NodePublishVolume (also on an inline ephemeral volume) and
    applies it itself (here to the volume's root); the agent walks nothing, though fsGroupPolicy File
    would have it change every file otherwise: a file already in the volume keeps its group. A pod
    without fsGroup sends none."""
    objects[("CSIDriver", DRIVER)]["spec"]["fsGroupPolicy"] = "File"
    claim_volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    inline = {"name": "scratch", "csi": {"driver": DRIVER}}
    flag = "--volume-mount-group"
    async with node_with_volume(short_dir, objects, flag, uids=("uid-g", "uid-h")) as (driver, manager):
        backing = driver.state_dir / "volumes/vol-1"
        (backing / "old.txt").write_text("there before")
        the_pod = pod("uid-g", claim_volume, inline, name="g")
        the_pod["spec"]["securityContext"] = {"fsGroup": 4321}
        ready = await manager.prepare(the_pod)
        (stage,) = driver.calls("NodeStageVolume")
        publishes = driver.calls("NodePublishVolume")
        assert stage["volume_capability"]["mount"] == {
            "mount_flags": ["noatime"],
            "volume_mount_group": "4321",
        }
        assert [p["volume_capability"]["mount"].get("volume_mount_group") for p in publishes] == ["4321"] * 2
        assert (backing.stat().st_gid, bool(backing.stat().st_mode & 0o2000)) == (4321, True)  # the driver's
        assert (backing / "old.txt").stat().st_gid == 0  # not walked by the agent
        assert Path(ready["scratch"].host_path).stat().st_gid == 4321
        await manager.teardown("uid-g")

        plain = pod("uid-h", claim_volume, name="h")
        await manager.prepare(plain)
        assert "volume_mount_group" not in driver.calls("NodePublishVolume")[-1]["volume_capability"]["mount"]
        await manager.teardown("uid-h")


async def test_a_publish_that_times_out_is_uncertain_and_unpublished_when_the_pod_goes(
    short_dir: Path, objects: dict, monkeypatch: pytest.MonkeyPatch
):
    """A NodePublishVolume slower than the node's deadline (shortened here from upstream's 15 s): the
    pod's FailedMount reads as upstream's kubelet's (Go's `context deadline exceeded`) and the pod waits;
    the driver mounts after the agent stopped waiting, so the publication is uncertain: when the pod goes
    it is unpublished all the same (upstream's VolumeMountUncertain) and nothing stays mounted."""
    monkeypatch.setattr(csiclient, "NODE_TIMEOUT", 1.0)
    inline = {"name": "scratch", "csi": {"driver": DRIVER}}
    root = short_dir / "kubelet"
    target = str(root / "pods/uid-t/volumes/kubernetes.io~csi/scratch/mount")
    flags = ("--publish-delay", "3", "--finish-late")
    async with node_with_volume(short_dir, objects, *flags, uids=("uid-t",)) as (driver, manager):
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-t", inline, name="t"))
        assert err.value.messages == (
            'MountVolume.SetUp failed for volume "scratch" : rpc error: code = DeadlineExceeded desc = '
            "context deadline exceeded",
        )
        await until(lambda: target in mounts_under(root), "the driver's late mount")
        await manager.teardown("uid-t")
        assert [c["target_path"] for c in driver.calls("NodeUnpublishVolume")] == [target]
        assert mounts_under(root) == []


async def test_a_stage_that_times_out_is_uncertain_unstaged_when_the_pod_goes_and_staged_again(
    short_dir: Path, objects: dict, monkeypatch: pytest.MonkeyPatch
):
    """A NodeStageVolume slower than the node's deadline whose mount the driver completes afterwards:
    upstream's MountDevice FailedMount, the staging uncertain (DeviceMountUncertain). The pod deleted
    before any retry: NodeUnstageVolume all the same, nothing left mounted. The next pod's retry after an
    uncertain stage calls NodeStageVolume again (idempotent: the driver finds its mount), then publishes,
    and its teardown unpublishes and unstages."""
    monkeypatch.setattr(csiclient, "NODE_TIMEOUT", 1.0)
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    root = short_dir / "kubelet"
    flags = ("--stage-delay", "3", "--finish-late")
    timed_out = (
        'MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = DeadlineExceeded desc = '
        "context deadline exceeded",
    )
    async with node_with_volume(short_dir, objects, *flags, uids=("uid-s", "uid-r")) as (driver, manager):
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-s", claim, name="s"))
        assert err.value.messages == timed_out
        (stage,) = driver.calls("NodeStageVolume")
        staging = stage["staging_target_path"]
        await until(lambda: staging in mounts_under(root), "the driver's late staging")
        await manager.teardown("uid-s")
        assert driver.calls("NodePublishVolume") == []
        assert [c["staging_target_path"] for c in driver.calls("NodeUnstageVolume")] == [staging]
        assert mounts_under(root) == []

        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-r", claim, name="r"))
        assert err.value.messages == timed_out
        await until(lambda: staging in mounts_under(root), "the driver's late staging")
        ready = await manager.prepare(pod("uid-r", claim, name="r"))
        assert len(driver.calls("NodeStageVolume")) == 3  # staged again after the uncertain try
        Path(ready["data"].host_path, "f").write_text("x")
        assert (driver.state_dir / "volumes/vol-1/f").read_text() == "x"
        await manager.teardown("uid-r")
        assert len(driver.calls("NodeUnpublishVolume")) == 1
        assert len(driver.calls("NodeUnstageVolume")) == 2
        assert mounts_under(root) == []


async def test_a_stage_that_fails_for_good_leaves_nothing_to_unstage(short_dir: Path, objects: dict):
    """A NodeStageVolume ending in a final error (the volume does not exist: NotFound) mounted nothing:
    the pod waits with upstream's message, and when it goes nothing is unstaged and no record stays."""
    objects[("PersistentVolume", "pv-1")]["spec"]["csi"]["volumeHandle"] = "vol-missing"
    claim = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    async with node_with_volume(short_dir, objects, uids=("uid-f",)) as (driver, manager):
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod("uid-f", claim, name="f"))
        assert err.value.messages == (
            'MountVolume.MountDevice failed for volume "pv-1" : rpc error: code = NotFound desc = '
            "volume vol-missing not found",
        )
        await manager.teardown("uid-f")
        assert driver.calls("NodeUnstageVolume") == []
        assert list((short_dir / "kubelet").glob("plugins/kubernetes.io/csi/*/*")) == []


async def test_wait_message_names_the_unattached_and_the_unprocessed(short_dir: Path, objects: dict):
    """A claim the populator cannot process beside a CSI volume still waiting for its attachment: one
    FailedMount, the volume manager's, listing both unmounted, the CSI one unattached, the missing claim
    not processed, with the populator's error."""
    objects[("CSIDriver", DRIVER)]["spec"]["attachRequired"] = True
    volumes = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "extra", "persistentVolumeClaim": {"claimName": "nope"}},
    ]
    the_pod = pod("uid-w", *volumes, name="w")
    mounts = [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in volumes]
    the_pod["spec"]["containers"] = [{"name": "c", "volumeMounts": mounts}]
    async with node_with_volume(short_dir, objects, uids=("uid-w",)) as (_, manager):
        with pytest.raises(VolumeError) as err:
            await manager.prepare(the_pod)
        assert err.value.messages == (
            "Unable to attach or mount volumes: unmounted volumes=[data extra], unattached volumes=[data], "
            "failed to process volumes=[extra]: error processing PVC ns/nope: failed to fetch PVC from API "
            'server: persistentvolumeclaims "nope" not found',
        )
