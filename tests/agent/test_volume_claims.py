"""persistentVolumeClaim volumes resolved on the host (the API reads stood in by a dict): a bound claim
gives its volume's hostPath (created for DirectoryOrCreate) or local path, readOnly from the pod's claim
source; a missing, unbound or being-deleted claim, or a volume not pointing back at it, is the kubelet's
FailedMount text naming every waiting volume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.csi.registry import DriverRegistry
from agent.volumes import VolumeError, VolumeManager, container_mounts, default_table
from agent.volumes.csi import CSIPlugin

OBJECTS: dict[tuple[str, str], dict] = {}


async def fetch(kind, ns, name):
    return OBJECTS.get((kind, name))


def claim(name: str, phase: str = "Bound", volume: str = "", uid: str = "c-uid", **meta) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": uid, **meta},
        "spec": {"volumeName": volume},
        "status": {"phase": phase},
    }


def pv(name: str, uid: str | None = "c-uid", **source) -> dict:
    spec: dict = dict(source)
    if uid is not None:
        spec["claimRef"] = {"namespace": "ns", "name": "data", "uid": uid}
    return {"metadata": {"name": name}, "spec": spec}


def pod(*volumes: dict) -> dict:
    mounts = [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in volumes]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1"},
        "spec": {"volumes": list(volumes), "containers": [{"name": "c", "volumeMounts": mounts}]},
    }


def uses(name: str, volume: str = "data", read_only: bool = False) -> dict:
    return {"name": volume, "persistentVolumeClaim": {"claimName": name, "readOnly": read_only}}


@pytest.fixture(autouse=True)
def objects():
    OBJECTS.clear()
    yield OBJECTS


@pytest.fixture
def manager(tmp_path: Path) -> VolumeManager:
    return VolumeManager(str(tmp_path), fetch, lambda p, path: "")


async def test_bound_claim_host_path_is_created_and_mounted(manager, tmp_path) -> None:
    folder = tmp_path / "pvs" / "pv-1"
    OBJECTS[("PersistentVolumeClaim", "data")] = claim("data", volume="pv-1")
    OBJECTS[("PersistentVolume", "pv-1")] = pv(
        "pv-1", hostPath={"path": str(folder), "type": "DirectoryOrCreate"}
    )
    ready = await manager.prepare(pod(uses("data"), uses("data", "ro", read_only=True)))
    assert folder.is_dir() and ready["data"].host_path == str(folder)
    assert not ready["data"].read_only and ready["ro"].read_only
    mounts = container_mounts(
        {
            "name": "c",
            "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "ro", "mountPath": "/r"}],
        },
        ready,
    )
    assert [(m.container_path, m.host_path, m.readonly) for m in mounts] == [
        ("/d", str(folder), False),
        ("/r", str(folder), True),
    ]


async def test_local_volume_needs_its_path(manager, tmp_path) -> None:
    OBJECTS[("PersistentVolumeClaim", "data")] = claim("data", volume="local-1")
    OBJECTS[("PersistentVolume", "local-1")] = pv("local-1", local={"path": str(tmp_path / "disk")})
    with pytest.raises(VolumeError) as err:
        await manager.prepare(pod(uses("data")))
    assert err.value.messages == (
        f'MountVolume.NewMounter initialization failed for volume "local-1" : path "{tmp_path / "disk"}" '
        "does not exist",
    )
    (tmp_path / "disk").mkdir()
    assert (await manager.prepare(pod(uses("data"))))["data"].host_path == str(tmp_path / "disk")


async def test_local_volume_measured_as_its_file_system(tmp_path) -> None:
    """A local volume's figures are the statfs of its path (upstream's local plugin metrics), named by
    the pod's volume with the claim behind it; a hostPath volume reports none, as upstream's. (The node's
    table as the agent builds it: CSI serves the claims with a csi source.)"""
    csi = CSIPlugin(DriverRegistry(), "node-a")
    manager = VolumeManager(
        str(tmp_path / "root"),
        fetch,
        lambda p, path: "",
        table=default_table(extra=[csi], claim_sources=[csi]),
    )
    disk = tmp_path / "disk"
    disk.mkdir()
    OBJECTS[("PersistentVolumeClaim", "data")] = claim("data", volume="local-1")
    OBJECTS[("PersistentVolume", "local-1")] = pv("local-1", local={"path": str(disk)})
    OBJECTS[("PersistentVolumeClaim", "other")] = claim("other", volume="host-1")
    OBJECTS[("PersistentVolume", "host-1")] = pv("host-1", hostPath={"path": str(tmp_path / "h")})
    the_pod = pod(uses("data", "store"), uses("other", "plain"))
    await manager.prepare(the_pod)
    (usage,) = await manager.stats(the_pod["metadata"]["uid"])
    fs = os.statvfs(disk)
    assert (usage.name, usage.folder, usage.claim) == (
        "store",
        "kubernetes.io~local-volume/local-1",
        ("ns", "data"),
    )
    assert (usage.capacity, usage.inodes) == (fs.f_blocks * fs.f_frsize, fs.f_files)
    assert 0 < usage.used <= usage.capacity and 0 < usage.available <= usage.capacity
    assert usage.inodes_used == usage.inodes - usage.inodes_free and usage.inodes_used > 0
    await manager.teardown(the_pod["metadata"]["uid"])


@pytest.mark.parametrize(
    ("objects_", "why"),
    [
        ({}, 'failed to fetch PVC from API server: persistentvolumeclaims "data" not found'),
        ({("PersistentVolumeClaim", "data"): claim("data", "Pending")}, "PVC is not bound"),
        (
            {
                ("PersistentVolumeClaim", "data"): claim(
                    "data", volume="x", deletionTimestamp="2024-01-01T00:00:00Z"
                )
            },
            "PVC is being deleted",
        ),
        (
            {("PersistentVolumeClaim", "data"): claim("data", volume="gone")},
            'failed to fetch PV gone from API server: persistentvolumes "gone" not found',
        ),
        (
            {
                ("PersistentVolumeClaim", "data"): claim("data", volume="pv-1"),
                ("PersistentVolume", "pv-1"): pv("pv-1", uid=None, hostPath={"path": "/tmp"}),
            },
            "found PV object pv-1 but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim",
        ),
        (
            {
                ("PersistentVolumeClaim", "data"): claim("data", volume="pv-1"),
                ("PersistentVolume", "pv-1"): pv("pv-1", uid="other", hostPath={"path": "/tmp"}),
            },
            "found PV object pv-1 but its pv.Spec.ClaimRef.UID other does not point to claim.UID c-uid",
        ),
    ],
)
async def test_claims_not_ready_keep_the_pod_waiting(manager, objects_, why) -> None:
    OBJECTS.update(objects_)
    with pytest.raises(VolumeError) as err:
        await manager.prepare(pod(uses("data"), {"name": "scratch", "emptyDir": {}}))
    assert str(err.value) == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[], "
        f"failed to process volumes=[data]: error processing PVC ns/data: {why}"
    )
