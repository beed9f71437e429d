"""What node conformance checks of volumes, on the host without containerd: fsGroup ownership and
fsGroupChangePolicy, file modes (defaultMode, per-item mode, with and without fsGroup), memory-backed
emptyDir as a sized tmpfs that goes with the pod, and configMap/secret/downwardAPI volumes rewritten
when their sources change."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agent.volumes import VolumeManager
from agent.volumes.emptydir import pod_memory_limit, tmpfs_size

OBJECTS: dict[tuple[str, str], dict] = {}


async def fetch(kind, ns, name):
    return OBJECTS.get((kind, name))


@pytest.fixture(autouse=True)
def objects():
    OBJECTS.clear()
    OBJECTS[("ConfigMap", "cfg")] = {"data": {"a": "1", "b": "2"}}
    yield OBJECTS


@pytest.fixture
def manager(tmp_path: Path) -> VolumeManager:
    return VolumeManager(
        str(tmp_path), fetch, lambda pod, path: pod["metadata"]["name"], node_memory=lambda: 2**30
    )


def make_pod(volumes, uid="u-1", security=None, containers=None, labels=None):
    """A pod whose container mounts every volume unless `containers` says otherwise (a volume no
    container uses is not set up)."""
    mounts = [{"name": v["name"], "mountPath": f"/v/{v['name']}"} for v in volumes]
    spec = {"volumes": volumes, "containers": containers or [{"name": "c", "volumeMounts": mounts}]}
    if security:
        spec["securityContext"] = security
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "labels": labels or {"app": "x"}},
        "spec": spec,
    }


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_modes_without_fs_group(manager, tmp_path):
    pod = make_pod(
        [
            {
                "name": "v",
                "configMap": {
                    "name": "cfg",
                    "defaultMode": 0o400,
                    "items": [{"key": "a", "path": "a"}, {"key": "b", "path": "sub/b", "mode": 0o440}],
                },
            }
        ]
    )
    vols = await manager.prepare(pod)
    root = Path(vols["v"].host_path)
    assert (mode(root / "a"), mode(root / "sub" / "b")) == (0o400, 0o440)
    assert (root / "a").stat().st_gid == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
async def test_fs_group_owns_volumes_and_adds_group_bits(manager):
    pod = make_pod(
        [
            {"name": "cm", "configMap": {"name": "cfg", "defaultMode": 0o400}},
            {"name": "scratch", "emptyDir": {}},
        ],
        security={"fsGroup": 1234},
    )
    vols = await manager.prepare(pod)
    cm = Path(vols["cm"].host_path)
    # Read-only volume: group read added (0400 -> 0440), folders get search and setgid.
    assert (cm / "a").stat().st_gid == 1234 and mode(cm / "a") == 0o440
    data = (cm / "..data").resolve()
    assert data.stat().st_gid == 1234 and data.stat().st_mode & stat.S_ISGID
    scratch = Path(vols["scratch"].host_path)
    assert scratch.stat().st_gid == 1234 and stat.S_IMODE(scratch.stat().st_mode) == 0o2777


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
async def test_on_root_mismatch_skips_a_volume_whose_root_is_right(manager):
    pod = make_pod(
        [{"name": "scratch", "emptyDir": {}}],
        security={"fsGroup": 1234, "fsGroupChangePolicy": "OnRootMismatch"},
    )
    vols = await manager.prepare(pod)
    inner = Path(vols["scratch"].host_path) / "file"
    inner.write_text("x")
    os.chown(inner, 0, 0)
    await manager.prepare(pod)
    assert inner.stat().st_gid == 0  # the root matched: no walk
    pod["spec"]["securityContext"]["fsGroupChangePolicy"] = "Always"
    await manager.prepare(pod)
    assert inner.stat().st_gid == 1234


def test_tmpfs_size_rules():
    limited = [
        {"name": "c", "resources": {"limits": {"memory": "64Mi"}}},
        {"name": "d", "resources": {"limits": {"memory": "32Mi"}}},
    ]
    assert pod_memory_limit(make_pod([], containers=limited)) == 96 * 2**20
    assert pod_memory_limit(make_pod([], containers=[*limited, {"name": "e"}])) == 0
    vol = {"name": "m", "emptyDir": {"medium": "Memory"}}
    assert tmpfs_size(make_pod([], containers=[{"name": "e"}]), vol, 2**30) == 2**30
    assert tmpfs_size(make_pod([], containers=limited), vol, 2**30) == 96 * 2**20
    sized = {"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}
    assert tmpfs_size(make_pod([], containers=limited), sized, 2**30) == 8 * 2**20
    big = {"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    assert tmpfs_size(make_pod([], containers=limited), big, 2**30) == 96 * 2**20


def _mount_of(path: str) -> list[str] | None:
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return fields
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="mount needs root")
async def test_memory_emptydir_is_a_sized_tmpfs_unmounted_on_teardown(manager):
    pod = make_pod([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "4Mi"}}])
    vols = await manager.prepare(pod)
    path = vols["m"].host_path
    try:
        fields = _mount_of(path)
        assert fields is not None and "tmpfs" in fields
        assert os.statvfs(path).f_blocks * os.statvfs(path).f_frsize == 4 * 2**20
        await manager.prepare(pod)  # a second pass mounts nothing more
        with open("/proc/self/mountinfo") as f:
            assert sum(1 for line in f if line.split()[4] == path) == 1
    finally:
        assert await manager.teardown("u-1") == [path]
    assert _mount_of(path) is None


async def test_refresh_rewrites_changed_config_maps_and_labels(manager):
    pod = make_pod(
        [
            {"name": "cm", "configMap": {"name": "cfg"}},
            {
                "name": "labels",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
        ]
    )
    vols = await manager.prepare(pod)
    cm, labels = Path(vols["cm"].host_path), Path(vols["labels"].host_path)
    assert not await manager.refresh(pod)  # nothing changed: nothing rewritten
    OBJECTS[("ConfigMap", "cfg")] = {"data": {"a": "changed"}}
    assert await manager.refresh(pod)
    assert (cm / "a").read_text() == "changed" and not (cm / "b").exists()
    pod["metadata"]["labels"] = {"app": "y"}
    assert await manager.refresh(pod)
    assert (labels / "labels").read_text() == 'app="y"'


# -- subPath and subPathExpr (upstream's makeMounts and pkg/volume/util/subpath) -----------------


@pytest.mark.parametrize(
    ("mount", "env", "message"),
    [
        ({"subPath": "/etc"}, {}, "error SubPath `/etc` must not be an absolute path"),
        ({"subPathExpr": "$(WHERE)"}, {"WHERE": "/abs"}, "error SubPath `/abs` must not be an absolute path"),
        (
            {"subPathExpr": "a/$(UP)/b"},
            {"UP": ".."},
            "unable to provision SubPath `a/../b`: must not contain '..'",
        ),
        ({"subPathExpr": "$(NOPE)/$(EMPTY)"}, {"EMPTY": ""}, "missing value for EMPTY, NOPE"),
    ],
)
async def test_sub_path_errors(manager, mount, env, message):
    from agent.volumes import VolumeError, container_mounts

    ready = await manager.prepare(make_pod([{"name": "e", "emptyDir": {}}]))
    with pytest.raises(VolumeError) as err:
        container_mounts(
            {"name": "c", "volumeMounts": [{"name": "e", "mountPath": "/x", **mount}]}, ready, env
        )
    assert str(err.value) == message


async def test_sub_path_expr_expands_the_container_env_and_stays_in_the_volume(manager):
    from agent.volumes import VolumeError, container_mounts

    ready = await manager.prepare(
        make_pod([{"name": "e", "emptyDir": {}}, {"name": "cm", "configMap": {"name": "cfg"}}])
    )
    root = Path(ready["e"].host_path)
    [m] = container_mounts(
        {"name": "c", "volumeMounts": [{"name": "e", "mountPath": "/x", "subPathExpr": "logs/$(POD)"}]},
        ready,
        {"POD": "web-1"},
    )
    assert m.host_path == str(root / "logs" / "web-1") and Path(m.host_path).is_dir()
    assert mode(Path(m.host_path)) == mode(root)
    (root / "escape").symlink_to("/etc")
    with pytest.raises(VolumeError, match='subpath "/etc" not within volume path'):
        container_mounts(
            {"name": "c", "volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "escape"}]}, ready
        )
    # A key of a configMap volume binds the file as it is now: a later update does not reach it.
    [pinned] = container_mounts(
        {"name": "c", "volumeMounts": [{"name": "cm", "mountPath": "/a", "subPath": "a"}]}, ready
    )
    assert (
        Path(pinned.host_path).read_text() == "1"
        and "..data" not in pinned.host_path
        and not Path(pinned.host_path).is_symlink()
    )


async def test_a_disk_empty_dir_over_its_size_limit_is_named(manager):
    pod = make_pod([{"name": "small", "emptyDir": {"sizeLimit": "1Mi"}}, {"name": "free", "emptyDir": {}}])
    vols = await manager.prepare(pod)
    (Path(vols["free"].host_path) / "big").write_bytes(os.urandom(3 * 2**20))
    assert await manager.empty_dir_over_limit(pod) is None  # no limit there
    (Path(vols["small"].host_path) / "half").write_bytes(os.urandom(2**19))
    assert await manager.empty_dir_over_limit(pod) is None
    (Path(vols["small"].host_path) / "more").write_bytes(os.urandom(2**20))
    assert (
        await manager.empty_dir_over_limit(pod)
        == 'Usage of EmptyDir volume "small" exceeds the limit "1Mi". '
    )
