"""The volume plugin table: a volume's type is the first registered field it sets, an unregistered type
is upstream's "not supported" FailedMount, a plugin registered beside the node's own serves its volumes
(set up, refreshed on sync, taken down with the pod), and a type cannot be registered twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.volumes import VolumeError, VolumeManager, default_table
from agent.volumes.plugin import PluginBase, PluginTable, ReadyVolume, VolumeHost


async def fetch(kind, ns, name):
    return None


class Scratch(PluginBase):
    """A test type: a folder per volume; it records what the manager asked of it."""

    kind = "scratch"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def set_up(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> ReadyVolume:
        folder = host.folder(pod, self.kind, volume["name"])
        folder.mkdir(parents=True)
        self.calls.append(("set_up", volume["name"]))
        return ReadyVolume(volume["name"], self.kind, str(folder), False)

    async def refresh(self, host: VolumeHost, pod: dict[str, Any], volume: dict[str, Any]) -> bool:
        self.calls.append(("refresh", volume["name"]))
        return True

    async def tear_down(self, host: VolumeHost, uid: str) -> None:
        self.calls.append(("tear_down", uid))


def pod(*volumes: dict) -> dict:
    """A pod whose one container mounts every volume (a volume no container uses is not set up)."""
    mounts = [{"name": v["name"], "mountPath": f"/v/{v['name']}"} for v in volumes]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"volumes": list(volumes), "containers": [{"name": "c", "volumeMounts": mounts}]},
    }


def test_kind_is_the_first_registered_field():
    table = default_table()
    assert table.kinds() == (
        "emptyDir",
        "hostPath",
        "persistentVolumeClaim",
        "configMap",
        "secret",
        "downwardAPI",
        "projected",
        "ephemeral",
    )
    assert table.kind_of({"name": "a", "configMap": {"name": "c"}}) == "configMap"
    assert table.kind_of({"name": "a"}) == "emptyDir"
    assert table.kind_of({"name": "a", "nfs": {"server": "s"}}) == "nfs"
    assert table.find("nfs") is None


def test_a_type_registers_once():
    table = PluginTable([Scratch()])
    with pytest.raises(ValueError, match="registered twice"):
        table.register(Scratch())


async def test_unregistered_type_is_not_supported(tmp_path: Path):
    manager = VolumeManager(str(tmp_path), fetch, lambda p, f: "")
    with pytest.raises(VolumeError) as err:
        await manager.prepare(pod({"name": "v", "scratch": {}}))
    assert (
        str(err.value)
        == 'MountVolume.SetUp failed for volume "v" : volume type scratch is not supported by this node'
    )


async def test_a_registered_plugin_serves_its_volumes(tmp_path: Path):
    scratch = Scratch()
    manager = VolumeManager(str(tmp_path), fetch, lambda p, f: "", table=default_table(extra=[scratch]))
    the_pod = pod({"name": "v", "scratch": {}}, {"name": "e", "emptyDir": {}})
    ready = await manager.prepare(the_pod)
    assert ready["v"].host_path == str(tmp_path / "pods/u1/volumes/kubernetes.io~scratch/v")
    assert Path(ready["v"].host_path).is_dir()
    assert ready["e"].kind == "emptyDir"
    assert await manager.refresh(the_pod) is True
    await manager.teardown("u1")
    assert scratch.calls == [("set_up", "v"), ("refresh", "v"), ("tear_down", "u1")]


async def test_generic_ephemeral_volume_uses_the_claim_its_pod_owns(tmp_path: Path):
    folder = tmp_path / "backing"
    folder.mkdir()
    objects = {
        ("PersistentVolumeClaim", "p-scratch"): {
            "metadata": {"name": "p-scratch", "namespace": "ns", "uid": "c1", "ownerReferences": []},
            "spec": {"volumeName": "pv-1"},
            "status": {"phase": "Bound"},
        },
        ("PersistentVolume", "pv-1"): {
            "metadata": {"name": "pv-1"},
            "spec": {"claimRef": {"uid": "c1"}, "local": {"path": str(folder)}},
        },
    }

    async def fetch_objects(kind, ns, name):
        return objects.get((kind, name))

    manager = VolumeManager(str(tmp_path), fetch_objects, lambda p, f: "")
    the_pod = pod({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    with pytest.raises(VolumeError) as err:
        await manager.prepare(the_pod)
    assert str(err.value).endswith(
        "error processing PVC ns/p-scratch: PVC ns/p-scratch was not created for pod ns/p (pod is not owner)"
    )
    objects[("PersistentVolumeClaim", "p-scratch")]["metadata"]["ownerReferences"] = [
        {"kind": "Pod", "name": "p", "uid": "u1", "controller": True}
    ]
    ready = await manager.prepare(the_pod)
    assert (ready["scratch"].kind, ready["scratch"].host_path) == ("ephemeral", str(folder))
