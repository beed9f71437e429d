"""The pod worker against the real containerd: start, adopt, restart under backoff, GC, terminate.

The API side is left out on purpose (status and events are kept in memory), so what is tested is
exactly the worker's conversation with CRI and what it leaves on the host: after termination no
sandbox, container, cgroup, netns or veth of the pod may remain.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.cri import CRIClient, pb
from agent.pods import labels as L
from agent.pods.backoff import BackoffTable
from agent.pods.context import PodContext
from agent.pods.dns import DNS
from agent.pods.events import kubelet_recorder
from agent.pods.images import ImageManager
from agent.pods.podstate import Phase
from agent.pods.qos import CGROUP_FS, remove_pod_cgroup
from agent.pods.runtime import RuntimeInspector
from agent.pods.status_manager import StatusManager
from agent.pods.worker import PodWorker
from pykubelet.rig.containerd import network_namespace, sandbox_runtime_spec
from pykubelet.rig.images import RigImages

pytestmark = pytest.mark.integration

CGROUP_ROOT = "/pykubelet-agent-tests"


async def no_objects(kind: str, ns: str, name: str) -> dict[str, Any] | None:
    return None


@pytest.fixture
async def ctx(cri: CRIClient, pod_log_dir: Path):
    cfg = AgentConfig(
        node_name="worker-test",
        pod_logs_dir=str(pod_log_dir),
        root_dir=str(pod_log_dir.parent / "agent-root"),
        cgroup_root=CGROUP_ROOT,
        sync_frequency=1.0,
    )
    recorder = kubelet_recorder(None, cfg.node_name)
    context = PodContext(
        cfg=cfg,
        cri=cri,
        inspector=RuntimeInspector(cri),
        images=ImageManager(cri, recorder, no_objects, True, BackoffTable(1, 4)),
        recorder=recorder,
        status=StatusManager(None),
        crash_backoff=BackoffTable(1, 4),
        fetch=no_objects,
        host_ip=lambda: "127.0.0.1",
        node_hostname="worker-test",
        host_dns=DNS(["127.0.0.1"], [], []),
        node_memory=2**30,
    )
    yield context
    await asyncio.to_thread(remove_pod_cgroup, CGROUP_ROOT)


def make_pod(image: str, script: str, restart: str = "Always") -> dict[str, Any]:
    uid = str(uuid.uuid4())
    return {
        "metadata": {"name": f"w-{uid[:6]}", "namespace": "default", "uid": uid, "labels": {"app": "w"}},
        "spec": {
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }
            ],
        },
        "status": {},
    }


async def sync_until(worker: PodWorker, ctx: PodContext, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = await worker.step()
        status = ctx.status.last(worker.uid)
        if status is not None and check(status):
            return status
        if done:
            raise AssertionError("worker finished early")
        await asyncio.sleep(0.2)
    raise AssertionError(f"not reached within {timeout} s: {ctx.status.last(worker.uid)}")


async def finish(worker: PodWorker, timeout: float = 60.0) -> None:
    """Passes until the worker is done (the pod deleted or gone: everything of it removed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, _ = await worker.step()
        if done:
            return
    raise AssertionError(f"worker not done within {timeout} s: phase {worker.phase}")


async def delete(pod: dict[str, Any], worker: PodWorker) -> None:
    """kubectl delete as the worker sees it: the deletion mark, then (after the final DELETE) gone."""
    pod["metadata"]["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod["metadata"]["deletionGracePeriodSeconds"] = 2
    while worker.phase is not Phase.FINISHED:
        await worker.step()
    worker.get_pod = lambda: None
    await finish(worker)


def sandbox_netns(status: pb.PodSandboxStatusResponse) -> Path:
    path = network_namespace(sandbox_runtime_spec(status))
    assert path is not None, "the sandbox has no network namespace"
    return Path(path)


def main(status: dict[str, Any]) -> dict[str, Any]:
    return status["containerStatuses"][0]


async def test_start_adopt_and_terminate(ctx: PodContext, cri: CRIClient, test_images: RigImages):
    pod = make_pod(test_images.busybox, "sleep 3600")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    status = await sync_until(worker, ctx, lambda s: s["phase"] == "Running")
    cid = main(status)["containerID"].removeprefix("containerd://")
    sandboxes = await cri.list_pod_sandbox(labels={L.POD_UID: uid})
    assert len(sandboxes) == 1 and sandboxes[0].labels["app"] == "w"
    netns = sandbox_netns(await cri.pod_sandbox_status(sandboxes[0].id, verbose=True))
    assert netns.exists()
    cgroup = CGROUP_FS / "memory" / CGROUP_ROOT.strip("/") / "kubepods" / "besteffort" / f"pod{uid}"
    assert cgroup.is_dir()
    assert status["podIP"] and status["conditions"][0] == {
        "type": "PodReadyToStartContainers",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": status["conditions"][0]["lastTransitionTime"],
    }

    # A new worker (as after an agent restart) adopts: same container, nothing created.
    fresh = PodWorker(ctx, uid, lambda: pod)
    ctx.inspector = RuntimeInspector(cri)
    ctx.runtime = None  # rebuilt on the new inspector, as a restarted agent has
    for _ in range(3):
        await fresh.step()
    containers = await cri.list_containers(labels={L.POD_UID: uid})
    assert [c.id for c in containers] == [cid]
    assert len(await cri.list_pod_sandbox(labels={L.POD_UID: uid})) == 1

    await delete(pod, fresh)
    assert await cri.list_containers(labels={L.POD_UID: uid}) == []
    assert await cri.list_pod_sandbox(labels={L.POD_UID: uid}) == []
    assert not cgroup.exists()
    reasons = [r for u, _t, r, _m in ctx.recorder.recorded if u == uid]
    assert "Pulled" in reasons and "Killing" in reasons
    assert (
        reasons.index("Pulled")
        < reasons.index("Created")
        < reasons.index("Started")
        < reasons.index("Killing")
    )
    # What the pod had on the host is gone with it (checked per object: other suites share the host).
    assert not netns.exists()


async def test_crash_loop_restarts_with_backoff_and_gc(
    ctx: PodContext, cri: CRIClient, test_images: RigImages
):
    pod = make_pod(test_images.busybox, "exit 2")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    status = await sync_until(
        worker, ctx, lambda s: main(s)["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
    )
    cs = main(status)
    assert cs["lastState"]["terminated"]["exitCode"] == 2 and cs["restartCount"] >= 1
    assert (
        f"restarting failed container=main pod={pod['metadata']['name']}_default({uid})"
        in cs["state"]["waiting"]["message"]
    )
    await sync_until(worker, ctx, lambda s: main(s)["restartCount"] >= 3)
    # Dead containers are collected down to the newest dead one (plus a live one, if any).
    await worker.step()
    containers = await cri.list_containers(labels={L.POD_UID: uid})
    exited = [c for c in containers if c.state == pb.CONTAINER_EXITED]
    assert len(exited) <= 2 and len(containers) <= 2
    # Restart counts come from CRI annotations, so they survive a fresh worker.
    counts = sorted(int(c.annotations[L.RESTART_COUNT]) for c in containers)
    assert counts[-1] >= 3
    # A collected container's log file goes with it (upstream's removeContainerLog): only the kept
    # containers' <restartCount>.log files are left.
    log_dir = Path(ctx.cfg.pod_logs_dir) / f"default_{pod['metadata']['name']}_{uid}" / "main"
    assert sorted(p.name for p in log_dir.iterdir()) == sorted(f"{n}.log" for n in counts)
    await delete(pod, worker)
    assert await cri.list_containers(labels={L.POD_UID: uid}) == []


async def test_never_pod_finishes_and_releases_sandbox(
    ctx: PodContext, cri: CRIClient, test_images: RigImages
):
    pod = make_pod(test_images.busybox, "echo bye", restart="Never")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    status = await sync_until(worker, ctx, lambda s: s["phase"] == "Succeeded")
    assert main(status)["state"]["terminated"]["reason"] == "Completed"
    while worker.phase is not Phase.FINISHED:  # terminating releases the sandbox
        await worker.step()
    sandboxes = await cri.list_pod_sandbox(labels={L.POD_UID: uid})
    assert [s.state for s in sandboxes] == [pb.SANDBOX_NOTREADY]
    assert len(await cri.list_containers(labels={L.POD_UID: uid})) == 1  # kept for logs
    log_dir = Path(ctx.cfg.pod_logs_dir) / f"default_{pod['metadata']['name']}_{uid}"
    assert (log_dir / "main" / "0.log").exists()
    # The pod vanished from the API: everything of it goes, its log folder included.
    worker.get_pod = lambda: None
    await finish(worker)
    assert await cri.list_pod_sandbox(labels={L.POD_UID: uid}) == []
    assert await cri.list_containers(labels={L.POD_UID: uid}) == []
    assert not log_dir.exists()


async def test_dead_sandbox_is_replaced(ctx: PodContext, cri: CRIClient, test_images: RigImages):
    pod = make_pod(test_images.busybox, "sleep 3600")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    await sync_until(worker, ctx, lambda s: s["phase"] == "Running")
    [old] = await cri.list_pod_sandbox(labels={L.POD_UID: uid})
    await cri.stop_pod_sandbox(old.id)  # the sandbox dies under the pod
    status = await sync_until(
        worker,
        ctx,
        lambda s: s["phase"] == "Running" and main(s)["restartCount"] == 1 and "running" in main(s)["state"],
    )
    ready = await cri.list_pod_sandbox(labels={L.POD_UID: uid}, state=pb.SANDBOX_READY)
    assert [s.metadata.attempt for s in ready] == [1]
    assert status["podIP"]
    assert any(u == uid and r == "SandboxChanged" for u, _t, r, _m in ctx.recorder.recorded)
    await delete(pod, worker)
    assert await cri.list_pod_sandbox(labels={L.POD_UID: uid}) == []


async def test_changed_image_restarts_container(ctx: PodContext, cri: CRIClient, test_images: RigImages):
    pod = make_pod(test_images.busybox, "sleep 3600")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    first = main(await sync_until(worker, ctx, lambda s: s["phase"] == "Running"))["containerID"]
    pod["spec"]["containers"][0]["image"] = test_images.busybox_pinned
    status = await sync_until(
        worker, ctx, lambda s: "running" in main(s)["state"] and main(s)["containerID"] != first
    )
    assert main(status)["restartCount"] == 1
    [live] = await cri.list_containers(labels={L.POD_UID: uid}, state=pb.CONTAINER_RUNNING)
    assert live.annotations[L.CONTAINER_HASH] == L.container_hash(pod["spec"]["containers"][0])
    await delete(pod, worker)


async def test_log_rotation(ctx: PodContext, cri: CRIClient, test_images: RigImages):
    from agent.pods.logrotate import LogRotator, RotationPolicy, rotated_files

    line = "x" * 200
    pod = make_pod(test_images.busybox, f"i=0; while true; do i=$((i+1)); echo $i-{line}; sleep 0.01; done")
    uid = pod["metadata"]["uid"]
    worker = PodWorker(ctx, uid, lambda: pod)
    await sync_until(worker, ctx, lambda s: s["phase"] == "Running")
    [c] = await cri.list_containers(labels={L.POD_UID: uid}, state=pb.CONTAINER_RUNNING)
    log_path = (await cri.container_status(c.id)).status.log_path
    rotator = LogRotator(cri, RotationPolicy(max_size=4096, max_files=3))
    for _ in range(4):
        while Path(log_path).stat().st_size < 4096:
            await asyncio.sleep(0.05)
        assert await rotator.rotate_once() >= 1
    old = rotated_files(log_path)
    assert len(old) == 2  # max_files 3: the live file and two earlier ones
    assert old[0].suffix == ".gz" and old[1].suffix != ".gz"  # all but the newest compressed
    # The runtime writes to the new file after the reopen.
    await asyncio.sleep(0.5)
    assert Path(log_path).stat().st_size > 0
    await delete(pod, worker)
