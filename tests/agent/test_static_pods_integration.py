"""The kubelet config file as kubeadm writes it, on a real `pykubelet agent` process (the config file and
the flags as a user passes them) with the real API server and its own containerd: static pods from
staticPodPath with their mirror pods, the plain-HTTP /healthz on healthzPort, and registerWithTaints.

One agent for the module (starting one is slow on a loaded machine); the static pod tests follow one
manifest through its life in order: it runs with a mirror pod carrying upstream's annotations and owner,
a deleted mirror pod is made again while the pod runs on, a bad manifest is reported and changes nothing
else, an edit restarts the pod under a new UID, and removing the file stops it and deletes the mirror.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from agent.cri import CRIClient, pb
from agent.pods import labels as L
from e2e.waiting import wait_for
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry
from tests.agent.conftest import module_containerd

pytestmark = pytest.mark.integration

CGROUP_ROOT = "/pykubelet-static-pod-tests"
TAINT = {"key": "example.com/static-test", "value": "yes", "effect": "NoSchedule"}
MIRROR = "kubernetes.io/config.mirror"
HASH = "kubernetes.io/config.hash"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture(scope="module")
def own_containerd(
    tmp_path_factory: pytest.TempPathFactory,
    registry: Registry,
    test_images: RigImages,
    ref_network: ReferenceBridgeNetwork,
) -> Iterator[Containerd]:
    with module_containerd(
        tmp_path_factory.mktemp("ctd"), registry, test_images, ref_network, CGROUP_ROOT
    ) as ctd:
        yield ctd


class Node:
    """The running agent and what the tests need of it."""

    def __init__(
        self, name: str, manifests: Path, healthz_port: int, api: client.CoreV1Api, endpoint: str, image: str
    ):
        self.image = image
        self.early_ran_offline = False
        self.name = name
        self.manifests = manifests
        self.healthz_port = healthz_port
        self.api = api
        self.endpoint = endpoint

    def mirror(self, base: str) -> Any:
        try:
            return self.api.read_namespaced_pod(f"{base}-{self.name}", "default")
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise


def pod_manifest(name: str, image: str, command: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "static"}},
            "spec": {
                "hostNetwork": True,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": image, "command": ["sh", "-c", command]}],
            },
        }
    )


def healthz_ok(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return resp.read() == b"ok"
    except OSError:
        return False


async def container_running(endpoint: str, pod_name: str) -> bool:
    cri = await CRIClient.connect(endpoint)
    try:
        return any(
            c.labels.get(L.POD_NAME) == pod_name and c.state == pb.CONTAINER_RUNNING
            for c in await cri.list_containers()
        )
    finally:
        await cri.close()


def in_thread(coro: Any) -> Any:
    """Run a coroutine to its end from synchronous code, whatever loop the caller's thread has."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="module")
def node(
    apiserver: ApiServer, own_containerd: Containerd, tmp_path_factory: pytest.TempPathFactory, test_images
) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("static-agent")
    name = f"static-{uuid.uuid4().hex[:6]}"
    manifests = root / "manifests"
    manifests.mkdir()
    healthz = free_port()
    # The node's own identity: the Node authorizer and NodeRestriction judge its mirror pods.
    kubeconfig = apiserver.client_kubeconfig(f"system:node:{name}", ("system:nodes",), root / "kubelet.conf")
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "staticPodPath": str(manifests),
                "healthzPort": healthz,
                "healthzBindAddress": "127.0.0.1",
                "port": free_port(),
                # The API server's kubelet client (kubectl logs) is a certificate of the cluster CA.
                "authentication": {"x509": {"clientCAFile": str(apiserver.ca_cert)}},
                "podLogsDir": str(root / "logs"),
                "cgroupRoot": CGROUP_ROOT,
                "fileCheckFrequency": "20s",
                "registerWithTaints": [TAINT],
                "syncFrequency": "0s",
            }
        )
    )
    argv = [
        sys.executable,
        "-m",
        "pykubelet",
        "agent",
        "--kubeconfig",
        str(kubeconfig),
        "--node-name",
        name,
        "--container-runtime-endpoint",
        own_containerd.endpoint,
        "--config",
        str(config),
        "--root-dir",
        str(root / "agent"),
    ]
    api = client.CoreV1Api(apiserver.api_client())
    agent = Daemon("pykubelet agent", argv, root / "agent.log", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # As kubeadm starts a node: the agent first, with a static pod and no API server to talk to.
    image = test_images.busybox_pinned
    (manifests / "early.yaml").write_text(pod_manifest("early", image, "sleep 3600"))

    def registered() -> bool:
        try:
            api.read_node(name)
        except client.ApiException:
            return False
        return True

    apiserver.stop()
    try:
        try:
            agent.start(lambda: healthz_ok(healthz), timeout=120, interval=0.5)
            early_ran = wait_for(
                lambda: in_thread(container_running(own_containerd.endpoint, f"early-{name}")),
                90,
                0.5,
                "the early static pod running with no API server",
            )
        finally:
            apiserver.start()
        wait_for(registered, 120, 0.5, "the node registered")
        found = Node(name, manifests, healthz, api, own_containerd.endpoint, image)
        found.early_ran_offline = early_ran
        yield found
    finally:
        for manifest in manifests.iterdir():
            manifest.unlink()
        agent.stop()
        try:
            api.delete_node(name)
        except client.ApiException:
            pass


@pytest.fixture
async def cri(node: Node) -> AsyncIterator[CRIClient]:
    c = await CRIClient.connect(node.endpoint)
    yield c
    await c.close()


def manifest(node: Node, command: str) -> str:
    return pod_manifest("web", node.image, command)


def running(node: Node) -> Any:
    mirror = node.mirror("web")
    if mirror is None or mirror.status.phase != "Running":
        return None
    return mirror


async def sandboxes_of(cri: CRIClient, uid: str) -> list[Any]:
    return [s for s in await cri.list_pod_sandbox() if s.labels.get(L.POD_UID) == uid]


def test_static_pod_starts_before_the_api_server_is_there(node: Node):
    """kubeadm's order: the agent and its static pod first (the control plane is static pods), the
    Node and the mirror pod once the API server answers."""
    assert node.early_ran_offline
    mirror = wait_for(lambda: node.mirror("early"), 90, 0.5, "the early pod's mirror pod")
    assert mirror.metadata.annotations[MIRROR] == mirror.metadata.annotations[HASH]
    (node.manifests / "early.yaml").unlink()
    wait_for(lambda: node.mirror("early") is None, 60, 0.5, "the early pod's mirror pod deleted")


def test_healthz_answers_ok_on_its_own_port(node: Node):
    with urllib.request.urlopen(f"http://127.0.0.1:{node.healthz_port}/healthz", timeout=10) as resp:
        assert (resp.status, resp.read()) == (200, b"ok")
    with urllib.request.urlopen(f"http://127.0.0.1:{node.healthz_port}/healthz?verbose", timeout=10) as resp:
        assert resp.read() == b"[+]ping ok\nhealthz check passed\n"


def test_node_registers_with_its_taints(node: Node):
    taints = [(t.key, t.value, t.effect) for t in node.api.read_node(node.name).spec.taints or []]
    assert (TAINT["key"], TAINT["value"], TAINT["effect"]) in taints


async def test_static_pod_runs_with_a_mirror_pod(node: Node, cri: CRIClient):
    (node.manifests / "web.yaml").write_text(manifest(node, "echo hello-static; sleep 3600"))
    mirror = await asyncio.to_thread(wait_for, lambda: running(node), 90, 0.5, "the mirror pod Running")
    annotations = mirror.metadata.annotations
    assert annotations["kubernetes.io/config.source"] == "file"
    assert annotations[MIRROR] == annotations[HASH] and len(annotations[HASH]) == 32
    assert annotations["kubernetes.io/config.seen"]
    assert mirror.metadata.uid != annotations[HASH]  # the API's own UID; the pod runs under the hash
    assert mirror.metadata.labels == {"app": "static"} and mirror.spec.node_name == node.name
    owner = mirror.metadata.owner_references[0]
    node_uid = node.api.read_node(node.name).metadata.uid
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Node", node.name, node_uid, True)
    ready = [s for s in await sandboxes_of(cri, annotations[HASH]) if s.state == pb.SANDBOX_READY]
    assert len(ready) == 1
    # kubectl logs on the mirror pod reaches the static pod's container through the kubelet API
    logs = await asyncio.to_thread(node.api.read_namespaced_pod_log, mirror.metadata.name, "default")
    assert logs == "hello-static\n"


async def test_deleted_mirror_pod_is_made_again_and_the_pod_runs_on(node: Node, cri: CRIClient):
    before = await asyncio.to_thread(wait_for, lambda: running(node), 60, 0.5)
    started = before.status.container_statuses[0].container_id
    node.api.delete_namespaced_pod(before.metadata.name, "default")

    def recreated() -> Any:
        mirror = running(node)
        return mirror if mirror is not None and mirror.metadata.uid != before.metadata.uid else None

    after = await asyncio.to_thread(wait_for, recreated, 60, 0.5, "a new mirror pod")
    assert after.metadata.annotations[MIRROR] == before.metadata.annotations[MIRROR]
    status = await asyncio.to_thread(
        wait_for, lambda: (running(node) or after).status.container_statuses, 30, 0.5
    )
    assert status[0].container_id == started and status[0].restart_count == 0  # never restarted


async def test_bad_manifests_get_an_event_and_change_nothing_else(node: Node):
    hash_before = running(node).metadata.annotations[HASH]
    (node.manifests / "service.yaml").write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    other = yaml.safe_load(manifest(node, "sleep 1"))
    other["metadata"]["name"] = "elsewhere"
    other["spec"]["nodeName"] = "another-node"
    (node.manifests / "elsewhere.yaml").write_text(yaml.safe_dump(other))

    def reported() -> list[str]:
        events = node.api.list_namespaced_event(
            "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node.name}"
        ).items
        messages = [
            e.message for e in events if e.reason == "FailedStaticPodManifest" and e.type == "Warning"
        ]
        return messages if len(messages) >= 2 else []

    messages = await asyncio.to_thread(wait_for, reported, 60, 0.5, "the two manifests reported")
    assert any("service.yaml" in m and "couldn't parse as pod" in m for m in messages)
    assert any("elsewhere.yaml" in m and '"another-node"' in m for m in messages)
    assert node.mirror("elsewhere") is None
    assert running(node).metadata.annotations[HASH] == hash_before
    (node.manifests / "service.yaml").unlink()
    (node.manifests / "elsewhere.yaml").unlink()


async def test_editing_the_manifest_restarts_the_pod_under_a_new_uid(node: Node, cri: CRIClient):
    old = running(node).metadata.annotations[HASH]
    (node.manifests / "web.yaml").write_text(manifest(node, "sleep 3601"))

    def replaced() -> Any:
        mirror = running(node)
        return mirror if mirror is not None and mirror.metadata.annotations[HASH] != old else None

    new = await asyncio.to_thread(wait_for, replaced, 90, 0.5, "the mirror pod of the edited manifest")
    assert new.metadata.annotations[MIRROR] == new.metadata.annotations[HASH]

    async def old_gone() -> bool:
        return not [s for s in await sandboxes_of(cri, old) if s.state == pb.SANDBOX_READY]

    for _ in range(120):
        if await old_gone():
            break
        await asyncio.sleep(0.5)
    assert await old_gone(), "the old pod's sandbox still runs"


async def test_removing_the_file_stops_the_pod_and_deletes_its_mirror(node: Node, cri: CRIClient):
    uid = running(node).metadata.annotations[HASH]
    (node.manifests / "web.yaml").unlink()
    await asyncio.to_thread(wait_for, lambda: node.mirror("web") is None, 60, 0.5, "the mirror pod deleted")
    for _ in range(120):
        if not await sandboxes_of(cri, uid):
            break
        await asyncio.sleep(0.5)
    assert not await sandboxes_of(cri, uid), "the static pod's sandbox is still there"


async def test_static_pod_runs_while_the_api_server_is_away(node: Node, apiserver: ApiServer, cri: CRIClient):
    """The pod comes from the disk: it starts with no API server to ask, and its mirror pod follows once
    the API server is back."""
    apiserver.stop()
    try:
        (node.manifests / "away.yaml").write_text(
            manifest(node, "sleep 3600").replace("name: web", "name: away")
        )

        async def running_in_cri() -> bool:
            containers = await cri.list_containers()
            return any(
                c.labels.get(L.POD_NAME) == f"away-{node.name}" and c.state == pb.CONTAINER_RUNNING
                for c in containers
            )

        for _ in range(120):
            if await running_in_cri():
                break
            await asyncio.sleep(0.5)
        assert await running_in_cri(), "the static pod did not start while the API server was away"
    finally:
        apiserver.start()
    mirror = await asyncio.to_thread(wait_for, lambda: node.mirror("away"), 90, 0.5, "the mirror pod")
    assert mirror.metadata.annotations[MIRROR] == mirror.metadata.annotations[HASH]
    (node.manifests / "away.yaml").unlink()
    await asyncio.to_thread(wait_for, lambda: node.mirror("away") is None, 60, 0.5, "the mirror pod deleted")
