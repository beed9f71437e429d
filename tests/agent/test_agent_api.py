"""The agent in-process against the real API server and its own containerd: registration, orphan
clean-up of sandboxes whose pods do not exist, status written only when it changes, and node status
re-posted only on change.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent.app import Agent
from agent.config import AgentConfig
from agent.cri import CRIClient, pb
from agent.pods import labels as L
from agent.pods.qos import remove_pod_cgroup
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry

pytestmark = pytest.mark.integration

CGROUP_ROOT = "/pykubelet-agent-api-tests"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture(scope="module")
def own_containerd(
    tmp_path_factory: pytest.TempPathFactory, registry: Registry, test_images: RigImages, ref_network: ReferenceBridgeNetwork
) -> Iterator[Containerd]:
    """A containerd for this module alone: the agent cleans up every pod sandbox it does not know, so it
    must not share a runtime with other suites' sandboxes."""
    ctd = Containerd(
        tmp_path_factory.mktemp("ctd"),
        cni_bin_dir=ref_network.bin_dir,
        cni_conf_dir=ref_network.conf_dir,
        sandbox_image=test_images.pause,
        registry=registry.address,
    )
    ctd.start()
    yield ctd
    left = ctd.stop()
    remove_pod_cgroup(CGROUP_ROOT)
    assert left.empty(), f"containerd teardown left {left}"


@pytest.fixture
async def agent(apiserver: ApiServer, own_containerd: Containerd, tmp_path: Path) -> AsyncIterator[Agent]:
    cfg = AgentConfig(
        node_name=f"api-{uuid.uuid4().hex[:6]}",
        kubeconfig=str(apiserver.kubeconfig),
        container_runtime_endpoint=own_containerd.endpoint,
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        cgroup_root=CGROUP_ROOT,
        node_status_update_frequency=0.5,
    )
    a = Agent(cfg)
    await asyncio.wait_for(a.start(), 30)
    yield a
    # Remove what the test's pods left, then stop the agent.
    assert a.cri is not None
    for sb in await a.cri.list_pod_sandbox():
        await a.cri.stop_pod_sandbox(sb.id)
        await a.cri.remove_pod_sandbox(sb.id)
    await a.stop()


async def wait_until(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"not reached within {timeout} s")


async def test_orphan_sandbox_is_removed(agent: Agent, own_containerd: Containerd, tmp_path: Path):
    async with await CRIClient.connect(own_containerd.endpoint) as cri:
        uid = str(uuid.uuid4())
        config = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="orphan", uid=uid, namespace="default"),
            log_directory=str(tmp_path / "orphan"),
            labels={L.POD_UID: uid, L.POD_NAME: "orphan", L.POD_NAMESPACE: "default"},
        )
        await cri.run_pod_sandbox(config)
        # Not labelled as a pod's: the agent must leave it alone.
        foreign = await cri.run_pod_sandbox(
            pb.PodSandboxConfig(metadata=pb.PodSandboxMetadata(name="foreign", uid="f", namespace="x"), log_directory=str(tmp_path / "f"))
        )

        async def gone():
            return not await cri.list_pod_sandbox(labels={L.POD_UID: uid})

        await wait_until(gone)
        assert [s.id for s in await cri.list_pod_sandbox(sandbox_id=foreign)] == [foreign]
        await cri.stop_pod_sandbox(foreign)
        await cri.remove_pod_sandbox(foreign)


async def test_status_written_only_on_change(agent: Agent, test_images: RigImages):
    client = agent.client
    node = agent.cfg.node_name
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"quiet-{uuid.uuid4().hex[:6]}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": test_images.busybox_pinned, "command": ["sleep", "3600"]}],
        },
    }
    created = await client.create("/api/v1/namespaces/default/pods", pod)
    path = f"/api/v1/namespaces/default/pods/{created['metadata']['name']}"

    async def running():
        got = await client.get(path)
        return got if got.get("status", {}).get("phase") == "Running" else None

    await wait_until(running)
    assert agent.pods is not None
    patches = agent.pods.ctx.status.patches
    # Several relists and resyncs later nothing changed, so nothing was written.
    worker = agent.pods.workers[created["metadata"]["uid"]]
    syncs = worker.syncs
    for _ in range(3):
        worker.wake()
        await asyncio.sleep(0.3)
    assert worker.syncs > syncs
    assert agent.pods.ctx.status.patches == patches

    # Node status: computed often (0.5 s here), posted only when it changed.
    assert agent.node is not None
    assert await agent.node.sync_status() is False

    await client.delete(path)

    async def deleted():
        try:
            await client.get(path)
        except Exception as err:  # ApiError 404
            return getattr(err, "status", 0) == 404
        return False

    await wait_until(deleted)


async def test_repeated_event_is_counted(agent: Agent):
    """The same event twice makes one Event object with count 2, as upstream's correlator does."""
    client = agent.client
    name = f"ev-{uuid.uuid4().hex[:6]}"
    pod = await client.create(
        "/api/v1/namespaces/default/pods",
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
         "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "busybox:1.35.0"}]}},
    )
    assert agent.pods is not None
    recorder = agent.pods.ctx.recorder
    for _ in range(2):
        recorder.event(pod, "Warning", "BackOff", "Back-off restarting failed container c", "spec.containers{c}")

    async def counted():
        items = (await client.get("/api/v1/namespaces/default/events"))["items"]
        ours = [e for e in items if e["involvedObject"].get("uid") == pod["metadata"]["uid"]]
        return ours if ours and ours[0].get("count") == 2 else None

    [event] = await wait_until(counted, timeout=15)
    assert event["source"] == {"component": "kubelet", "host": agent.cfg.node_name}
    assert event["involvedObject"]["fieldPath"] == "spec.containers{c}" and event["type"] == "Warning"
    await client.delete(f"/api/v1/namespaces/default/pods/{name}", {"gracePeriodSeconds": 0})
