"""Volume set-up on the host: the atomic layout of configMap/secret/downwardAPI/projected volumes,
hostPath type checks, emptyDir, and volumeMounts turned into CRI mounts."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from agent.cri import pb
from agent.volumes import VolumeError, VolumeManager, container_mounts
from agent.volumes.manager import write_atomic

OBJECTS = {
    ("ConfigMap", "cfg"): {"data": {"app.conf": "a=1\n", "other": "x"}},
    ("Secret", "sec"): {"data": {"token": base64.b64encode(b"t0k").decode()}},
}


async def fetch(kind, ns, name):
    return OBJECTS.get((kind, name))


def make_pod(volumes, uid="u-1"):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": uid, "labels": {"app": "x", "tier": "web"}}, "spec": {"volumes": volumes}}


@pytest.fixture
def manager(tmp_path: Path) -> VolumeManager:
    return VolumeManager(str(tmp_path), fetch, lambda pod, path: {"metadata.name": "p"}[path])


async def test_config_secret_downward_projected(manager: VolumeManager, tmp_path: Path):
    pod = make_pod([
        {"name": "c", "configMap": {"name": "cfg", "items": [{"key": "app.conf", "path": "conf/app.conf"}]}},
        {"name": "s", "secret": {"secretName": "sec", "defaultMode": 0o400}},
        {"name": "d", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}, {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        {"name": "pr", "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "sec"}}]}},
        {"name": "e", "emptyDir": {}},
    ])
    ready = await manager.prepare(pod)
    c = Path(ready["c"].host_path)
    assert (c / "conf" / "app.conf").read_text() == "a=1\n" and not (c / "other").exists()
    assert (c / "conf").is_symlink() and os.readlink(c / "..data").startswith("..")
    s = Path(ready["s"].host_path) / "token"
    assert s.read_bytes() == b"t0k" and (s.resolve().stat().st_mode & 0o777) == 0o400
    d = Path(ready["d"].host_path)
    assert (d / "labels").read_text() == 'app="x"\ntier="web"' and (d / "name").read_text() == "p"
    assert {p.name for p in Path(ready["pr"].host_path).iterdir() if not p.name.startswith("..")} == {"app.conf", "other", "token"}
    assert ready["c"].read_only and not ready["e"].read_only
    assert Path(ready["e"].host_path).is_dir()
    assert str(c).startswith(str(tmp_path / "pods" / "u-1" / "volumes"))


def test_atomic_update_swaps_data(tmp_path: Path):
    target = tmp_path / "v"
    assert write_atomic(target, {"a": (b"1", 0o644), "b": (b"2", 0o644)})
    first = os.readlink(target / "..data")
    assert not write_atomic(target, {"a": (b"1", 0o644), "b": (b"2", 0o644)})  # unchanged: untouched
    assert write_atomic(target, {"a": (b"3", 0o644)})
    assert os.readlink(target / "..data") != first and not (target / first).exists()
    assert (target / "a").read_text() == "3" and not (target / "b").exists()


async def test_missing_objects_and_optional(manager: VolumeManager):
    with pytest.raises(VolumeError, match='MountVolume.SetUp failed for volume "c" : configmap "absent" not found'):
        await manager.prepare(make_pod([{"name": "c", "configMap": {"name": "absent"}}]))
    ready = await manager.prepare(make_pod([{"name": "c", "configMap": {"name": "absent", "optional": True}}]))
    assert [n for n in os.listdir(ready["c"].host_path) if not n.startswith("..")] == []
    with pytest.raises(VolumeError, match="not supported"):
        await manager.prepare(make_pod([{"name": "n", "nfs": {"server": "x", "path": "/"}}]))


async def test_host_path_types(manager: VolumeManager, tmp_path: Path):
    made = tmp_path / "made" / "here"
    ready = await manager.prepare(make_pod([{"name": "h", "hostPath": {"path": str(made), "type": "DirectoryOrCreate"}}]))
    assert made.is_dir() and ready["h"].host_path == str(made)
    with pytest.raises(VolumeError, match="is not a file"):
        await manager.prepare(make_pod([{"name": "h", "hostPath": {"path": str(made), "type": "File"}}]))


async def test_container_mounts(manager: VolumeManager):
    pod = make_pod([{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "cfg"}}])
    ready = await manager.prepare(pod)
    container = {"name": "main", "volumeMounts": [
        {"name": "e", "mountPath": "/data", "subPath": "sub"},
        {"name": "c", "mountPath": "/etc/app"},
        {"name": "e", "mountPath": "/ro", "readOnly": True, "mountPropagation": "HostToContainer"},
    ]}
    mounts = container_mounts(container, ready)
    assert [(m.container_path, m.readonly) for m in mounts] == [("/data", False), ("/etc/app", True), ("/ro", True)]
    assert mounts[0].host_path.endswith("/sub") and Path(mounts[0].host_path).is_dir()
    assert mounts[2].propagation == pb.PROPAGATION_HOST_TO_CONTAINER
    with pytest.raises(VolumeError, match="relative path"):
        container_mounts({"name": "m", "volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "../../etc"}]}, ready)
    with pytest.raises(VolumeError, match='unable to find volume "zz"'):
        container_mounts({"name": "m", "volumeMounts": [{"name": "zz", "mountPath": "/x"}]}, ready)
