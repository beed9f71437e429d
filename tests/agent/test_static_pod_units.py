"""Static pods without a stack: a manifest to the pod upstream's file source makes, the directory source
(real files, real inotify), and the mirror pod reconciler's decisions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agent.staticpods.keys import CONFIG_HASH, CONFIG_MIRROR, CONFIG_SEEN, CONFIG_SOURCE
from agent.staticpods.manifest import ManifestError, static_pod
from agent.staticpods.mirror import MirrorPods, mirror_body
from agent.staticpods.source import INVALID_REASON, StaticPodSource

MANIFEST = b"""\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox:1.36
    command: [sleep, "3600"]
"""


def test_manifest_makes_upstreams_static_pod():
    pod = static_pod(MANIFEST, "/etc/kubernetes/manifests/web.yaml", "Node-1", seen="2026-01-01T00:00:00.0Z")
    meta, spec = pod["metadata"], pod["spec"]
    assert (meta["name"], meta["namespace"], spec["nodeName"]) == ("web-node-1", "default", "Node-1")
    annotations = meta["annotations"]
    assert annotations[CONFIG_HASH] == meta["uid"] and len(meta["uid"]) == 32
    assert (annotations[CONFIG_SOURCE], annotations[CONFIG_SEEN]) == ("file", "2026-01-01T00:00:00.0Z")
    assert {"operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert (spec["restartPolicy"], spec["terminationGracePeriodSeconds"], spec["dnsPolicy"]) == (
        "Always",
        30,
        "ClusterFirst",
    )
    assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["status"] == {"phase": "Pending"}
    # the UID follows the content, the file and the node: stable, and new on any edit
    again = static_pod(MANIFEST, "/etc/kubernetes/manifests/web.yaml", "Node-1")
    assert again["metadata"]["uid"] == meta["uid"]
    edited = static_pod(MANIFEST.replace(b"3600", b"3601"), "/etc/kubernetes/manifests/web.yaml", "Node-1")
    assert edited["metadata"]["uid"] != meta["uid"]
    assert static_pod(MANIFEST, "/elsewhere/web.yaml", "Node-1")["metadata"]["uid"] != meta["uid"]
    assert (
        static_pod(MANIFEST, "/etc/kubernetes/manifests/web.yaml", "node-2")["metadata"]["uid"] != meta["uid"]
    )


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{not: [yaml", "couldn't parse as pod"),
        (b"apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "couldn't parse as pod"),
        (b"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", "spec.containers"),
        (MANIFEST + b"  nodeName: other-node\n", 'bound to node "other-node"'),
    ],
)
def test_bad_manifest_says_why(data: bytes, says: str):
    with pytest.raises(ManifestError, match=says):
        static_pod(data, "/m/p.yaml", "node-1")


async def wait_for(condition, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_directory_source_follows_the_files_through_inotify(tmp_path: Path):
    changes: list[set[str]] = []
    warnings: list[tuple[str, str]] = []
    source = StaticPodSource(
        str(tmp_path), "node-1", 3600.0, changes.append, lambda r, m: warnings.append((r, m))
    )
    (tmp_path / "web.yaml").write_bytes(MANIFEST)
    (tmp_path / ".web.yaml.swp").write_bytes(b"garbage")  # dot-files are ignored
    (tmp_path / "sub").mkdir()  # directories are not entered
    (tmp_path / "sub" / "x.yaml").write_bytes(MANIFEST)
    await source.rescan()
    assert [p["metadata"]["name"] for p in source.list()] == ["web-node-1"] and not warnings
    first = next(iter(source.pods))
    task = asyncio.create_task(source.run())
    try:
        await wait_for(lambda: source.passes >= 2)  # the watch is set (the period is an hour)
        (tmp_path / "web.yaml").write_bytes(MANIFEST.replace(b"3600", b"3601"))  # an edit: a new UID
        await wait_for(lambda: first not in source.pods and len(source.pods) == 1)
        assert first in changes[-1] and len(changes[-1]) == 2
        (tmp_path / "bad.yaml").write_bytes(b"apiVersion: v1\nkind: Pod\n")
        await wait_for(lambda: len(warnings) == 1)
        assert warnings[0][0] == INVALID_REASON and "bad.yaml" in warnings[0][1] and len(source.pods) == 1
        (tmp_path / ".hidden.yaml").write_bytes(MANIFEST.replace(b"web", b"hidden"))
        (tmp_path / "web.yaml").unlink()  # deleting the file removes the pod
        await wait_for(lambda: not source.pods)
        assert len(warnings) == 1  # the bad manifest is reported once, not on every pass
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class FakeApi:
    """Records the mirror reconciler's writes; pods posted show up in its list."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        obj = {**body, "metadata": {**meta, "uid": f"api-{len(self.calls)}"}}
        self.pods[f"{meta['namespace']}/{meta['name']}"] = obj
        self.calls.append(("create", f"{meta['namespace']}/{meta['name']}"))
        return obj

    async def delete(self, path: str, body: dict[str, Any]) -> None:
        _, _, _, ns, _, name = path.strip("/").split("/")
        assert (
            body["gracePeriodSeconds"] == 0
            and body["preconditions"]["uid"] == self.pods[f"{ns}/{name}"]["metadata"]["uid"]
        )
        del self.pods[f"{ns}/{name}"]
        self.calls.append(("delete", f"{ns}/{name}"))


async def test_mirror_pods_follow_the_static_pods():
    static = static_pod(MANIFEST, "/m/web.yaml", "node-1")
    body = mirror_body(static, "node-1", "node-uid")
    assert body["metadata"]["annotations"][CONFIG_MIRROR] == static["metadata"]["uid"]
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "node-uid", "controller": True}
    ]
    assert "uid" not in body["metadata"] and "status" not in body

    api = FakeApi()
    statics = [static]
    mirrors = MirrorPods(
        api, "node-1", lambda: "node-uid", lambda: statics, lambda: list(api.pods.values()), lambda: True
    )  # type: ignore[arg-type]
    await mirrors.reconcile()
    await mirrors.reconcile()  # nothing more to do
    assert api.calls == [("create", "default/web-node-1")]
    # someone deletes it gracefully: deleted for good and made again
    api.pods["default/web-node-1"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await mirrors.reconcile()
    assert api.calls[1:] == [("delete", "default/web-node-1"), ("create", "default/web-node-1")]
    # the manifest edited: the outdated mirror goes, the new one comes
    statics[0] = static_pod(MANIFEST.replace(b"3600", b"1"), "/m/web.yaml", "node-1")
    await mirrors.reconcile()
    assert api.calls[3:] == [("delete", "default/web-node-1"), ("create", "default/web-node-1")]
    assert (
        api.pods["default/web-node-1"]["metadata"]["annotations"][CONFIG_MIRROR]
        == statics[0]["metadata"]["uid"]
    )
    # the manifest removed: the orphaned mirror goes
    statics.clear()
    await mirrors.reconcile()
    assert api.calls[5:] == [("delete", "default/web-node-1")] and not api.pods


async def test_an_edited_manifests_pod_waits_for_the_old_one_to_stop():
    """upstream's allowStaticPodStart: two static pods of one full name never run at once."""
    from agent.pods.manager import PodManager
    from tests.agent.fakeruntime import FakeRuntime, fake_context

    manager = PodManager(fake_context(FakeRuntime()))
    old = static_pod(MANIFEST, "/m/web.yaml", "node-1")
    new = static_pod(MANIFEST.replace(b"3600", b"1"), "/m/web.yaml", "node-1")

    class Stopping:
        uid = old["metadata"]["uid"]
        last_pod = old
        running = True

        def could_have_running(self) -> bool:
            return self.running

    stopping = Stopping()
    manager.workers[stopping.uid] = stopping  # type: ignore[assignment]
    assert not manager.static_may_start(new)
    assert manager.static_may_start(old)  # itself is no obstacle
    api_pod = {**new, "metadata": {**new["metadata"], "annotations": {}}}
    assert manager.static_may_start(api_pod)  # pods from the API never wait
    stopping.running = False
    assert manager.static_may_start(new)
