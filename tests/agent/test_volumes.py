"""Volume set-up on the host: the atomic layout of configMap/secret/downwardAPI/projected volumes,
hostPath type checks, emptyDir, and volumeMounts turned into CRI mounts."""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path

import pytest

from agent.cri import pb
from agent.volumes import VolumeError, VolumeManager, container_mounts
from agent.volumes.mountwait import MountWaits
from agent.volumes.projection import write_atomic

OBJECTS = {
    ("ConfigMap", "cfg"): {"data": {"app.conf": "a=1\n", "other": "x"}},
    ("Secret", "sec"): {"data": {"token": base64.b64encode(b"t0k").decode()}},
}


async def fetch(kind, ns, name):
    return OBJECTS.get((kind, name))


def make_pod(volumes, uid="u-1"):
    """A pod whose one container mounts every volume (a volume no container uses is not set up)."""
    mounts = [{"name": v["name"], "mountPath": f"/v/{v['name']}"} for v in volumes]
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid, "labels": {"app": "x", "tier": "web"}},
        "spec": {"volumes": volumes, "containers": [{"name": "c", "volumeMounts": mounts}]},
    }


@pytest.fixture
def manager(tmp_path: Path) -> VolumeManager:
    return VolumeManager(str(tmp_path), fetch, lambda pod, path: {"metadata.name": "p"}[path])


async def test_config_secret_downward_projected(manager: VolumeManager, tmp_path: Path):
    pod = make_pod(
        [
            {
                "name": "c",
                "configMap": {"name": "cfg", "items": [{"key": "app.conf", "path": "conf/app.conf"}]},
            },
            {"name": "s", "secret": {"secretName": "sec", "defaultMode": 0o400}},
            {
                "name": "d",
                "downwardAPI": {
                    "items": [
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                    ]
                },
            },
            {
                "name": "pr",
                "projected": {"sources": [{"configMap": {"name": "cfg"}}, {"secret": {"name": "sec"}}]},
            },
            {"name": "e", "emptyDir": {}},
        ]
    )
    ready = await manager.prepare(pod)
    c = Path(ready["c"].host_path)
    assert (c / "conf" / "app.conf").read_text() == "a=1\n" and not (c / "other").exists()
    assert (c / "conf").is_symlink() and os.readlink(c / "..data").startswith("..")
    s = Path(ready["s"].host_path) / "token"
    assert s.read_bytes() == b"t0k" and (s.resolve().stat().st_mode & 0o777) == 0o400
    d = Path(ready["d"].host_path)
    assert (d / "labels").read_text() == 'app="x"\ntier="web"' and (d / "name").read_text() == "p"
    assert {p.name for p in Path(ready["pr"].host_path).iterdir() if not p.name.startswith("..")} == {
        "app.conf",
        "other",
        "token",
    }
    assert ready["c"].read_only and not ready["e"].read_only
    assert Path(ready["e"].host_path).is_dir()
    assert str(c).startswith(str(tmp_path / "pods" / "u-1" / "volumes"))
    # Each under its plugin's folder as upstream's kubelet names them (the plugin name, '/' as '~').
    assert {name: Path(v.host_path).parent.name for name, v in ready.items()} == {
        "c": "kubernetes.io~configmap",
        "s": "kubernetes.io~secret",
        "d": "kubernetes.io~downward-api",
        "pr": "kubernetes.io~projected",
        "e": "kubernetes.io~empty-dir",
    }


def test_atomic_update_swaps_data(tmp_path: Path):
    target = tmp_path / "v"
    assert write_atomic(target, {"a": (b"1", 0o644), "b": (b"2", 0o644)})
    first = os.readlink(target / "..data")
    assert not write_atomic(target, {"a": (b"1", 0o644), "b": (b"2", 0o644)})  # unchanged: untouched
    assert write_atomic(target, {"a": (b"3", 0o644)})
    assert os.readlink(target / "..data") != first and not (target / first).exists()
    assert (target / "a").read_text() == "3" and not (target / "b").exists()


async def test_missing_objects_and_optional(manager: VolumeManager):
    with pytest.raises(
        VolumeError, match='MountVolume.SetUp failed for volume "c" : configmap "absent" not found'
    ):
        await manager.prepare(make_pod([{"name": "c", "configMap": {"name": "absent"}}]))
    ready = await manager.prepare(
        make_pod([{"name": "c", "configMap": {"name": "absent", "optional": True}}])
    )
    assert [n for n in os.listdir(ready["c"].host_path) if not n.startswith("..")] == []
    with pytest.raises(VolumeError, match="not supported"):
        await manager.prepare(make_pod([{"name": "n", "nfs": {"server": "x", "path": "/"}}]))


@pytest.mark.parametrize("user", ["initContainers", "ephemeralContainers", "volumeDevices"])
async def test_only_volumes_a_container_uses_are_set_up(manager: VolumeManager, tmp_path: Path, user: str):
    """upstream's populator skips a volume no container (init, regular, ephemeral) mounts or uses as a
    device: a configMap volume of a missing ConfigMap and an emptyDir nobody mounts are not set up (the
    pod is not held, nothing is made on disk, a sync rewrites nothing, the wait message does not name
    them); a volume any kind of container uses is."""
    missing = {"name": "conf", "configMap": {"name": "absent"}}
    unused_dir = {"name": "spare", "emptyDir": {}}
    used = {"name": "work", "emptyDir": {}}
    pod = make_pod([missing, unused_dir, used])
    pod["spec"]["containers"] = [{"name": "c"}]
    if user == "volumeDevices":
        pod["spec"]["containers"][0]["volumeDevices"] = [{"name": "work", "devicePath": "/dev/x"}]
    else:
        pod["spec"][user] = [{"name": "i", "volumeMounts": [{"name": "work", "mountPath": "/w"}]}]
    ready = await manager.prepare(pod)
    assert list(ready) == ["work"]
    volumes = tmp_path / "pods/u-1/volumes"
    assert [p.name for p in volumes.glob("*/*")] == ["work"]
    assert await manager.refresh(pod) is False  # the missing ConfigMap is not looked for on sync either
    pod["spec"]["volumes"].append({"name": "claim", "persistentVolumeClaim": {"claimName": "nope"}})
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "claim", "mountPath": "/c"}]
    with pytest.raises(VolumeError) as err:
        await manager.prepare(pod)
    assert err.value.messages[0].startswith(
        "Unable to attach or mount volumes: unmounted volumes=[claim], unattached volumes=[], "
        "failed to process volumes=[claim]: "
    )


async def test_a_mount_wait_past_upstreams_timeout_is_logged(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
):
    """1.32's kubelet waits 2 min 3 s (podAttachAndMountTimeout) for a pod's volumes; when that passes
    it records no event (an interrupted wait: the reconciler's FailedMount events already say why) and
    the pod worker logs `Error syncing pod, skipping` with WaitForAttachAndMount's error, then waits
    anew. A fake clock stands for the passes' times; the log line comes once per timed-out wait, never
    before, and a wait that ends in ready volumes is over."""
    now = [1000.0]
    manager = VolumeManager(str(tmp_path), fetch, lambda pod, path: "", waits=MountWaits(lambda: now[0]))
    pod = make_pod([{"name": "conf", "configMap": {"name": "absent"}}], uid="u-w")
    caplog.set_level(logging.ERROR, logger="agent.volumes")
    expected = (
        'Error syncing pod, skipping err="unmounted volumes=[conf], unattached volumes=[], failed to '
        'process volumes=[]: context deadline exceeded" pod="ns/p" podUID="u-w"'
    )
    logged = []
    for at in (1000.0, 1060.0, 1122.9, 1123.0, 1124.0, 1245.9, 1246.0):
        now[0] = at
        caplog.clear()
        with pytest.raises(VolumeError) as err:
            await manager.prepare(pod)
        assert err.value.messages == (
            'MountVolume.SetUp failed for volume "conf" : configmap "absent" not found',
        )
        logged += [(at, r.getMessage()) for r in caplog.records]
    assert logged == [(1123.0, expected), (1246.0, expected)]
    pod["spec"]["volumes"][0]["configMap"]["name"] = "cfg"
    now[0] = 1300.0
    await manager.prepare(pod)  # ready: the wait is over
    pod["spec"]["volumes"][0]["configMap"]["name"] = "absent"
    caplog.clear()
    for at in (1400.0, 1522.9):  # a new wait, begun at 1400
        now[0] = at
        with pytest.raises(VolumeError):
            await manager.prepare(pod)
    manager.forget("u-w")  # the pod went: a wait of the same uid would start from nothing
    now[0] = 1523.0
    with pytest.raises(VolumeError):
        await manager.prepare(pod)
    assert caplog.records == []


async def test_host_path_types(manager: VolumeManager, tmp_path: Path):
    made = tmp_path / "made" / "here"
    ready = await manager.prepare(
        make_pod([{"name": "h", "hostPath": {"path": str(made), "type": "DirectoryOrCreate"}}])
    )
    assert made.is_dir() and ready["h"].host_path == str(made)
    with pytest.raises(VolumeError, match="is not a file"):
        await manager.prepare(make_pod([{"name": "h", "hostPath": {"path": str(made), "type": "File"}}]))


async def test_container_mounts(manager: VolumeManager):
    pod = make_pod([{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "cfg"}}])
    ready = await manager.prepare(pod)
    container = {
        "name": "main",
        "volumeMounts": [
            {"name": "e", "mountPath": "/data", "subPath": "sub"},
            {"name": "c", "mountPath": "/etc/app"},
            {"name": "e", "mountPath": "/ro", "readOnly": True, "mountPropagation": "HostToContainer"},
        ],
    }
    mounts = container_mounts(container, ready)
    assert [(m.container_path, m.readonly) for m in mounts] == [
        ("/data", False),
        ("/etc/app", True),
        ("/ro", True),
    ]
    assert mounts[0].host_path.endswith("/sub") and Path(mounts[0].host_path).is_dir()
    assert mounts[2].propagation == pb.PROPAGATION_HOST_TO_CONTAINER
    with pytest.raises(VolumeError, match="unable to provision SubPath `../../etc`: must not contain '..'"):
        container_mounts(
            {"name": "m", "volumeMounts": [{"name": "e", "mountPath": "/x", "subPath": "../../etc"}]}, ready
        )
    with pytest.raises(VolumeError, match='unable to find volume "zz"'):
        container_mounts({"name": "m", "volumeMounts": [{"name": "zz", "mountPath": "/x"}]}, ready)


# --- projected service-account tokens ------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class FakeTokenAPI:
    """Stands in for TokenRequest: numbered tokens, each valid for what was asked; can be made to fail."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, str, list[str], int, str, str]] = []
        self.fail = False

    async def __call__(self, namespace, account, audiences, expiration, pod_name, pod_uid):
        from agent.kube.tokens import IssuedToken
        from kubeclient.errors import ApiError

        if self.fail:
            raise ApiError(503, "ServiceUnavailable", "the server is down")
        self.calls.append((namespace, account, audiences, expiration, pod_name, pod_uid))
        return IssuedToken(f"token-{len(self.calls)}", self.clock.now + expiration, expiration)


def token_pod(expiration: int | None = 3607, audience: str = "") -> dict:
    source: dict = {"path": "token"}
    if expiration is not None:
        source["expirationSeconds"] = expiration
    if audience:
        source["audience"] = audience
    pod = make_pod(
        [
            {
                "name": "kube-api-access-x2z4k",
                "projected": {
                    "defaultMode": 0o644,
                    "sources": [
                        {"serviceAccountToken": source},
                        {"configMap": {"name": "cfg", "items": [{"key": "app.conf", "path": "ca.crt"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ]
    )
    pod["spec"]["serviceAccountName"] = "robot"
    return pod


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def token_api(clock: Clock) -> FakeTokenAPI:
    return FakeTokenAPI(clock)


@pytest.fixture
def with_tokens(tmp_path: Path, clock: Clock, token_api: FakeTokenAPI) -> VolumeManager:
    from agent.volumes.tokens import TokenManager

    def field(pod, path):
        return {"metadata.namespace": pod["metadata"]["namespace"]}[path]

    return VolumeManager(
        str(tmp_path), fetch, field, tokens=TokenManager(token_api, clock, jitter=lambda: 0.0)
    )


async def test_service_account_token_projection(with_tokens: VolumeManager, token_api: FakeTokenAPI):
    pod = token_pod(audience="vault")
    ready = await with_tokens.prepare(pod)
    folder = Path(ready["kube-api-access-x2z4k"].host_path)
    assert folder.name == "kube-api-access-x2z4k" and folder.parent.name == "kubernetes.io~projected"
    assert (folder / "token").read_text() == "token-1"
    assert (folder / "namespace").read_text() == "ns" and (folder / "ca.crt").read_text() == "a=1\n"
    # Bound to the pod, for its account, the audience and lifetime the projection asks for.
    assert token_api.calls == [("ns", "robot", ["vault"], 3607, "p", "u-1")]
    # Upstream's layout and modes: files 0644 in a 0755 timestamped folder behind ..data.
    data = folder / os.readlink(folder / "..data")
    for name in ("token", "ca.crt", "namespace"):
        assert (folder / name).is_symlink() and os.readlink(folder / name) == f"..data/{name}"
        assert (data / name).stat().st_mode & 0o777 == 0o644
    assert data.stat().st_mode & 0o777 == 0o755 and ready["kube-api-access-x2z4k"].read_only
    # Another pass before the token is due keeps it; no second TokenRequest.
    await with_tokens.prepare(pod)
    assert len(token_api.calls) == 1
    # No audience: none is sent (the API server's own apply); the default lifetime is 3600 s.
    await with_tokens.prepare(token_pod(expiration=None))
    assert token_api.calls[-1][2:4] == ([], 3600)


async def test_tokens_are_refreshed_at_80_percent_of_their_life(
    with_tokens: VolumeManager, clock: Clock, token_api: FakeTokenAPI
):
    pod = token_pod(expiration=3607)
    ready = await with_tokens.prepare(pod)
    folder = Path(ready["kube-api-access-x2z4k"].host_path)
    first = os.readlink(folder / "..data")
    # 80 % of 3607 s is 2886 s (upstream computes the 20 % in whole seconds: 721).
    assert with_tokens.refresh_in("u-1") == pytest.approx(3607 - 721)
    clock.now += 2885
    assert not await with_tokens.refresh(pod) and (folder / "token").read_text() == "token-1"
    clock.now += 2
    assert await with_tokens.refresh(pod)
    assert (folder / "token").read_text() == "token-2" and len(token_api.calls) == 2
    # Swapped atomically: a new timestamped folder behind ..data, the old one gone.
    assert os.readlink(folder / "..data") != first and not (folder / first).exists()
    assert with_tokens.refresh_in("u-1") == pytest.approx(2886)


async def test_long_lived_tokens_are_refreshed_after_a_day(
    with_tokens: VolumeManager, clock: Clock, token_api: FakeTokenAPI
):
    pod = token_pod(expiration=7 * 24 * 3600)
    await with_tokens.prepare(pod)
    assert with_tokens.refresh_in("u-1") == pytest.approx(24 * 3600)
    clock.now += 24 * 3600 + 1
    assert await with_tokens.refresh(pod) and len(token_api.calls) == 2


async def test_a_failed_refresh_keeps_the_valid_token_and_retries_later(
    with_tokens: VolumeManager, clock: Clock, token_api: FakeTokenAPI
):
    from agent.volumes.tokens import RETRY_AFTER_FAILURE

    pod = token_pod(expiration=600)
    ready = await with_tokens.prepare(pod)
    folder = Path(ready["kube-api-access-x2z4k"].host_path)
    clock.now += 500  # due at 480 s, valid until 600 s
    token_api.fail = True
    assert not await with_tokens.refresh(pod) and (folder / "token").read_text() == "token-1"
    assert with_tokens.refresh_in("u-1") == pytest.approx(RETRY_AFTER_FAILURE)  # no tight retry loop
    clock.now += 200  # expired, and still no API: the mount fails as upstream's does
    with pytest.raises(
        VolumeError, match='volume "kube-api-access-x2z4k" : failed to fetch token: the server is down'
    ):
        await with_tokens.refresh(pod)
    token_api.fail = False
    assert await with_tokens.refresh(pod) and (folder / "token").read_text() == "token-2"
    with_tokens.forget("u-1")
    assert with_tokens.refresh_in("u-1") is None


async def test_token_projection_needs_a_token_source(manager: VolumeManager):
    with pytest.raises(VolumeError, match=r"projection \['serviceAccountToken'\] is not supported"):
        await manager.prepare(token_pod())
