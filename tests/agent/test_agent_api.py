"""The agent in-process against the real API server and its own containerd: registration, orphan
clean-up of sandboxes whose pods do not exist, status written only when it changes, and node status
re-posted only on change.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.app import Agent
from agent.config import AgentConfig
from agent.cri import CRIClient, CRIError, pb
from agent.pods import labels as L
from e2e.waiting import wait_for_async
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages
from pykubelet.rig.process import free_port
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry
from tests.agent.conftest import module_containerd
from tests.clientpki import client_pki as bare_client_pki

pytestmark = pytest.mark.integration

CGROUP_ROOT = "/pykubelet-agent-api-tests"


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
    """A containerd for this module alone."""
    with module_containerd(
        tmp_path_factory.mktemp("ctd"), registry, test_images, ref_network, CGROUP_ROOT
    ) as ctd:
        yield ctd


@contextlib.asynccontextmanager
async def running_agent(
    apiserver: ApiServer,
    own_containerd: Containerd,
    tmp_path: Path,
    client_pki: dict[str, Path],
    node_name: str = "",
) -> AsyncIterator[Agent]:
    """An agent of a node of its own (a fresh name unless given) on the module's API server and
    containerd."""
    node_name = node_name or f"api-{uuid.uuid4().hex[:6]}"
    # The node's own credentials, as a kubelet has: the Node authorizer and NodeRestriction apply.
    kubeconfig = apiserver.client_kubeconfig(
        f"system:node:{node_name}", ("system:nodes",), tmp_path / "kubelet.kubeconfig"
    )
    cfg = AgentConfig(
        port=free_port(),
        address="127.0.0.1",
        client_ca_file=str(client_pki["ca"]),
        node_name=node_name,
        kubeconfig=str(kubeconfig),
        container_runtime_endpoint=own_containerd.endpoint,
        root_dir=str(tmp_path / "root"),
        pod_logs_dir=str(tmp_path / "logs"),
        cgroup_root=CGROUP_ROOT,
        node_status_update_frequency=0.5,
        # A denial is remembered for cacheUnauthorizedTTL (30 s by default); the token test's caller is
        # bound after its first refusal, so the agent here forgets refusals after 2 s.
        authorization_unauthorized_ttl=2.0,
    )
    a = Agent(cfg)
    await asyncio.wait_for(a.start(), 30)
    try:
        yield a
    finally:
        await a.stop()
    # Remove what the test's pods left (the agent may have been half-way through removing them).
    async with await CRIClient.connect(own_containerd.endpoint) as cri:
        for sb in await cri.list_pod_sandbox():
            try:
                await cri.stop_pod_sandbox(sb.id)
                await cri.remove_pod_sandbox(sb.id)
            except CRIError:
                pass


@pytest.fixture
async def agent(
    apiserver: ApiServer, own_containerd: Containerd, tmp_path: Path, client_pki: dict[str, Path]
) -> AsyncIterator[Agent]:
    async with running_agent(apiserver, own_containerd, tmp_path, client_pki) as a:
        yield a


@pytest.fixture
async def admin(apiserver: ApiServer) -> AsyncIterator[KubeClient]:
    """The test's own client (the administrator): it creates and deletes pods as users do; the agent acts
    on its node's credentials."""
    async with KubeClient(load_kubeconfig(apiserver.kubeconfig)) as client:
        yield client


@pytest.fixture(scope="module")
def client_pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A client CA and one client certificate it signed, for the kubelet API's x509 authentication."""
    return bare_client_pki(tmp_path_factory.mktemp("client-pki"), "kube-apiserver-kubelet-client")


def kubelet_tls(client_pki: dict[str, Path] | None = None) -> ssl.SSLContext:
    """A client context for the kubelet API: its serving certificate is self-signed (upstream's default
    too), so it is not verified; with `client_pki`, the client certificate is presented."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if client_pki is not None:
        context.load_cert_chain(str(client_pki["cert"]), str(client_pki["key"]))
    return context


async def upgrade_refused(
    http: aiohttp.ClientSession, url: str, params, ctx: ssl.SSLContext
) -> tuple[int, str]:
    """The status and text of a WebSocket upgrade the server refuses."""
    headers = {
        "Connection": "Upgrade",
        "Upgrade": "websocket",
        "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Protocol": "v4.channel.k8s.io",
    }
    async with http.get(url, params=params, headers=headers, ssl=ctx) as resp:
        return resp.status, await resp.text()


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
            pb.PodSandboxConfig(
                metadata=pb.PodSandboxMetadata(name="foreign", uid="f", namespace="x"),
                log_directory=str(tmp_path / "f"),
            )
        )

        async def gone():
            return not await cri.list_pod_sandbox(labels={L.POD_UID: uid})

        await wait_for_async(gone, timeout=30.0, interval=0.2)
        assert [s.id for s in await cri.list_pod_sandbox(sandbox_id=foreign)] == [foreign]
        await cri.stop_pod_sandbox(foreign)
        await cri.remove_pod_sandbox(foreign)


async def test_status_written_only_on_change(agent: Agent, admin: KubeClient, test_images: RigImages):
    client = admin
    node = agent.cfg.node_name
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"quiet-{uuid.uuid4().hex[:6]}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": test_images.busybox_pinned, "command": ["sleep", "3600"]}
            ],
        },
    }
    created = await client.create("/api/v1/namespaces/default/pods", pod)
    path = f"/api/v1/namespaces/default/pods/{created['metadata']['name']}"

    async def running():
        got = await client.get(path)
        return got if got.get("status", {}).get("phase") == "Running" else None

    await wait_for_async(running, timeout=30.0, interval=0.2)
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

    await wait_for_async(deleted, timeout=30.0, interval=0.2)


async def test_node_status_marked_unknown_by_another_writer_is_put_right_at_once(
    agent: Agent, admin: KubeClient
):
    """As the node lifecycle controller does after a partition: the conditions say Unknown while our
    last post said Ready. The next sync sees the Node as the API holds it and posts again."""
    assert agent.node is not None
    assert await agent.node.sync_status() is False  # nothing changed since the last post
    unknown = {
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "message": "Kubelet stopped posting node status.",
    }
    conditions = [{**c, **unknown} for c in agent.node.node["status"]["conditions"]]
    await admin.patch(f"/api/v1/nodes/{agent.cfg.node_name}/status", {"status": {"conditions": conditions}})
    assert await agent.node.sync_status() is True
    node = await admin.get(f"/api/v1/nodes/{agent.cfg.node_name}")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")


async def test_repeated_event_is_counted(agent: Agent, admin: KubeClient):
    """The same event twice makes one Event object with count 2, as upstream's correlator does."""
    client = admin
    name = f"ev-{uuid.uuid4().hex[:6]}"
    pod = await client.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "elsewhere", "containers": [{"name": "c", "image": "busybox:1.35.0"}]},
        },
    )
    assert agent.pods is not None
    recorder = agent.pods.ctx.recorder
    for _ in range(2):
        recorder.event(
            pod, "Warning", "BackOff", "Back-off restarting failed container c", "spec.containers{c}"
        )

    async def counted():
        items = (await client.get("/api/v1/namespaces/default/events"))["items"]
        ours = [e for e in items if e["involvedObject"].get("uid") == pod["metadata"]["uid"]]
        return ours if ours and ours[0].get("count") == 2 else None

    [event] = await wait_for_async(counted, timeout=15, interval=0.2)
    assert event["source"] == {"component": "kubelet", "host": agent.cfg.node_name}
    assert event["involvedObject"]["fieldPath"] == "spec.containers{c}" and event["type"] == "Warning"
    await client.delete(f"/api/v1/namespaces/default/pods/{name}", {"gracePeriodSeconds": 0})


async def test_kubelet_api_logs(
    agent: Agent, admin: KubeClient, test_images: RigImages, client_pki: dict[str, Path]
):
    client = admin
    name = f"talk-{uuid.uuid4().hex[:6]}"
    # stdout and stderr are written by separate runtime goroutines: a pause keeps their order fixed.
    script = "echo one; echo two; sleep 0.5; echo three >&2; sleep 2; echo four; exit 0"
    await client.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": agent.cfg.node_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "main", "image": test_images.busybox_pinned, "command": ["sh", "-c", script]}
                ],
            },
        },
    )
    assert agent.server is not None
    base = f"https://127.0.0.1:{agent.server.port}"
    trusted, with_cert = kubelet_tls(), kubelet_tls(client_pki)
    logs = f"{base}/containerLogs/default/{name}/main"
    async with aiohttp.ClientSession() as http:
        # Upstream's secure port authenticates /healthz too (the open one is healthzPort, 10248).
        async with http.get(f"{base}/healthz", ssl=trusted) as resp:
            assert (resp.status, await resp.text()) == (401, "Unauthorized")
        async with http.get(f"{base}/healthz", ssl=with_cert) as resp:
            assert (resp.status, await resp.text()) == (200, "ok")
        async with http.get(logs, ssl=trusted) as resp:
            assert resp.status == 401  # no client certificate, anonymous off

        async def started():
            async with http.get(logs, ssl=with_cert) as resp:
                return resp.status == 200 and "one" in await resp.text()

        await wait_for_async(started, timeout=30.0, interval=0.2)
        # follow: streams until the container exits, then ends.
        async with http.get(logs, params={"follow": "true"}, ssl=with_cert) as resp:
            body = await asyncio.wait_for(resp.text(), 30)
        assert body == "one\ntwo\nthree\nfour\n"
        async with http.get(logs, params={"tailLines": "2", "timestamps": "true"}, ssl=with_cert) as resp:
            lines = (await resp.text()).splitlines()
        assert [line.split(" ", 1)[1] for line in lines] == ["three", "four"]
        assert lines[0].split(" ", 1)[0].endswith("Z")
        async with http.get(logs, params={"limitBytes": "5"}, ssl=with_cert) as resp:
            assert await resp.text() == "one\nt"
        async with http.get(logs, params={"previous": "true"}, ssl=with_cert) as resp:
            assert resp.status == 400 and "previous terminated container" in (await resp.json())["message"]
        async with http.get(f"{base}/pods", ssl=with_cert) as resp:
            names = [p["metadata"]["name"] for p in (await resp.json())["items"]]
            assert name in names
        # The container has exited: no streaming session for it.
        assert await upgrade_refused(
            http, f"{base}/exec/default/{name}/main", {"command": "true", "output": "1"}, with_cert
        ) == (500, 'container not found ("main")')
    await client.delete(f"/api/v1/namespaces/default/pods/{name}")


async def test_kubelet_api_streams_are_proxied_to_the_runtime(
    agent: Agent, admin: KubeClient, test_images: RigImages, client_pki: dict[str, Path]
):
    name = f"sh-{uuid.uuid4().hex[:6]}"
    await admin.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": agent.cfg.node_name,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {"name": "main", "image": test_images.busybox_pinned, "command": ["sleep", "3600"]}
                ],
            },
        },
    )
    path = f"/api/v1/namespaces/default/pods/{name}"

    async def running():
        return (await admin.get(path)).get("status", {}).get("phase") == "Running"

    await wait_for_async(running, timeout=30.0, interval=0.2)
    assert agent.server is not None
    ctx = kubelet_tls(client_pki)
    base = f"https://127.0.0.1:{agent.server.port}"
    exec_url = f"{base}/exec/default/{name}/main"
    async with aiohttp.ClientSession() as http:
        # The kubelet proxies the upgraded connection to the runtime's streaming server (WebSocket,
        # v4.channel.k8s.io: the first byte of each message names the stream; 1 is stdout, 3 the status).
        out, status = b"", b""
        params = [("command", "sh"), ("command", "-c"), ("command", "echo hi; exit 3"), ("output", "1")]
        async with http.ws_connect(exec_url, params=params, protocols=["v4.channel.k8s.io"], ssl=ctx) as ws:
            assert ws.protocol == "v4.channel.k8s.io"
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY and msg.data[:1] == b"\x01":
                    out += msg.data[1:]
                elif msg.type == aiohttp.WSMsgType.BINARY and msg.data[:1] == b"\x03":
                    status += msg.data[1:]
        assert out == b"hi\n"
        assert '"reason":"NonZeroExitCode"' in status.decode() and '"message":"3"' in status.decode()
        # /run: the command's output, run to completion (cmd split on white space, as upstream).
        async with http.post(f"{base}/run/default/{name}/main", params={"cmd": "echo ran"}, ssl=ctx) as resp:
            assert (resp.status, await resp.text()) == (200, "ran\n")
        # Not an upgrade: refused before any runtime session is made.
        async with http.post(exec_url, params=params, ssl=ctx) as resp:
            assert resp.status == 400 and (await resp.json())["message"] == "Upgrade request required"
        assert await upgrade_refused(http, f"{base}/exec/default/{name}/other", params, ctx) == (
            500,
            'container not found ("other")',
        )
    await admin.delete(path)


async def test_kubelet_api_probe_metrics(
    agent: Agent, admin: KubeClient, test_images: RigImages, client_pki: dict[str, Path]
):
    """/metrics/probes counts what the prober did for a real container, behind client-certificate auth."""
    name = f"probed-{uuid.uuid4().hex[:6]}"
    await admin.create(
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeName": agent.cfg.node_name,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": test_images.busybox_pinned,
                        "command": ["sleep", "3600"],
                        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                    }
                ],
            },
        },
    )

    async def ready():
        pod = await admin.get(f"/api/v1/namespaces/default/pods/{name}")
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0]["ready"]

    await wait_for_async(ready, timeout=30.0, interval=0.2)
    assert agent.server is not None
    with_cert = kubelet_tls(client_pki)
    url = f"https://127.0.0.1:{agent.server.port}/metrics/probes"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, ssl=with_cert) as resp:
            assert resp.status == 200
            text = await resp.text()
        async with http.get(url, ssl=kubelet_tls()) as resp:
            assert resp.status == 401
    counts = [
        line
        for line in text.splitlines()
        if line.startswith('prober_probe_total{probe_type="Readiness",result="successful"}')
    ]
    assert counts and float(counts[0].rsplit(" ", 1)[1]) >= 1
    assert 'prober_probe_duration_seconds_count{handler="exec",probe_type="Readiness"}' in text
    await admin.delete(f"/api/v1/namespaces/default/pods/{name}")


async def test_kubelet_api_bearer_tokens_are_reviewed_by_the_api_server(
    agent: Agent, admin: KubeClient, caplog: pytest.LogCaptureFixture
):
    """A service-account token on the kubelet API: reviewed by the real API server (TokenReview), the
    request authorized there (SubjectAccessReview under RBAC: forbidden until the account is bound to
    system:kubelet-api-admin); a bad token is a bare 401; neither token reaches a log line."""
    import logging

    caplog.set_level(logging.DEBUG)
    client = admin
    account = f"caller-{uuid.uuid4().hex[:6]}"
    await client.create("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": account}})
    issued = await client.create(
        f"/api/v1/namespaces/default/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = issued["status"]["token"]
    forged = token[:-12] + "AAAAAAAAAAAA"
    assert agent.server is not None
    url = f"https://127.0.0.1:{agent.server.port}/pods"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, ssl=kubelet_tls(), headers={"Authorization": f"Bearer {token}"}) as resp:
            assert (resp.status, await resp.text()) == (
                403,
                f"Forbidden (user=system:serviceaccount:default:{account}, "
                "verb=get, resource=nodes, subresource=proxy)",
            )
        binding = f"{account}-kubelet-api"
        await client.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "system:kubelet-api-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
            },
        )

        async def allowed() -> bool:
            async with http.get(url, ssl=kubelet_tls(), headers={"Authorization": f"Bearer {token}"}) as resp:
                return resp.status == 200 and (await resp.json())["kind"] == "PodList"

        await wait_for_async(allowed, timeout=20, interval=0.2)
        async with http.get(url, ssl=kubelet_tls(), headers={"Authorization": f"Bearer {forged}"}) as resp:
            assert (resp.status, await resp.text()) == (401, "Unauthorized")
        async with http.get(url, ssl=kubelet_tls()) as resp:
            assert resp.status == 401
    assert any(
        "kubelet api request user=system:serviceaccount:default:" in r.getMessage() for r in caplog.records
    )
    for record in caplog.records:
        text = record.getMessage()
        assert token.split(".")[2] not in text and forged.split(".")[2][:-12] not in text
    await client.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")
    await client.delete(f"/api/v1/namespaces/default/serviceaccounts/{account}")


async def test_node_events_reach_the_api(agent: Agent, admin: KubeClient):
    """Starting, the conditions' events and NodeAllocatableEnforced, about the Node, from kubelet on it,
    in the default namespace (where events of cluster-scoped objects go)."""
    node = agent.cfg.node_name

    async def reported():
        items = (await admin.get("/api/v1/namespaces/default/events"))["items"]
        mine = [
            e
            for e in items
            if e["involvedObject"].get("kind") == "Node" and e["involvedObject"].get("name") == node
        ]
        reasons = {e["reason"]: e for e in mine}
        wanted = {
            "Starting",
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID",
            "NodeAllocatableEnforced",
        }
        return reasons if wanted <= set(reasons) else None

    reasons = await wait_for_async(reported, timeout=20, interval=0.2)
    assert reasons["Starting"]["message"] == "Starting kubelet."
    assert reasons["NodeHasSufficientPID"]["message"] == f"Node {node} status is now: NodeHasSufficientPID"
    assert reasons["NodeAllocatableEnforced"]["message"] == "Updated Node Allocatable limit across pods"
    event = reasons["Starting"]
    assert event["involvedObject"]["uid"] == node and event["source"] == {
        "component": "kubelet",
        "host": node,
    }


async def test_the_node_is_created_with_its_status_and_announces_it_once(
    apiserver: ApiServer,
    own_containerd: Containerd,
    tmp_path: Path,
    client_pki: dict[str, Path],
    admin: KubeClient,
):
    """Upstream's registerWithAPIServer: the Node is created with the status setNodeStatus computed, so
    its first version (the watch's ADDED event) already has conditions, addresses, capacity, nodeInfo
    and the kubelet's endpoint; the conditions' events are sent once."""
    node = f"api-{uuid.uuid4().hex[:6]}"
    since = (await admin.get("/api/v1/nodes"))["metadata"]["resourceVersion"]

    async def first_version() -> dict[str, Any]:
        params = {"resourceVersion": since, "fieldSelector": f"metadata.name={node}"}
        async for event in admin.watch("/api/v1/nodes", params):
            return event
        raise AssertionError("the watch ended without an event")

    async with running_agent(apiserver, own_containerd, tmp_path, client_pki, node) as agent:
        first = await asyncio.wait_for(first_version(), 30)
        assert first["type"] == "ADDED"
        status = first["object"].get("status") or {}
        assert sorted(c["type"] for c in status.get("conditions") or []) == [
            "DiskPressure",
            "MemoryPressure",
            "PIDPressure",
            "Ready",
        ]
        assert {"type": "Hostname", "address": node} in status["addresses"]
        assert any(a["type"] == "InternalIP" for a in status["addresses"])
        assert status["capacity"]["pods"] == status["allocatable"]["pods"] == str(agent.cfg.max_pods)
        assert status["nodeInfo"]["bootID"] and status["nodeInfo"]["kubeletVersion"]
        assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": agent.cfg.port}}
        wanted = {"NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"}

        async def announced() -> list[dict[str, Any]] | None:
            items = (await admin.get("/api/v1/namespaces/default/events"))["items"]
            mine = [e for e in items if e["involvedObject"].get("name") == node and e["reason"] in wanted]
            return mine if {e["reason"] for e in mine} == wanted else None

        events = await wait_for_async(announced, timeout=20, interval=0.2)
        assert sorted((e["reason"], e["count"]) for e in events) == sorted((r, 1) for r in wanted)


async def test_a_pod_bound_right_after_its_node_label_runs(agent: Agent, admin: KubeClient, test_images):
    """Issue 30: the scheduler saw the label, the agent's cached Node did not yet; admission checks the
    Node as the API holds it now before refusing, so the pod runs instead of failing NodeAffinity."""
    assert agent.node is not None and agent.node.node is not None
    node = agent.cfg.node_name
    key = f"example.com/fresh-{uuid.uuid4().hex[:6]}"
    before = copy.deepcopy(agent.node.node)
    await admin.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {key: "yes"}}})
    agent.node.node = before  # the agent's view is still the Node from before the label
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"fresh-{uuid.uuid4().hex[:6]}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "nodeSelector": {key: "yes"},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "main", "image": test_images.busybox_pinned, "command": ["sleep", "3600"]}
            ],
        },
    }
    created = await admin.create("/api/v1/namespaces/default/pods", pod)
    path = f"/api/v1/namespaces/default/pods/{created['metadata']['name']}"

    async def settled():
        got = await admin.get(path)
        return got["status"].get("phase") in ("Running", "Failed") and got

    got = await wait_for_async(settled, timeout=30.0, interval=0.2)
    assert got["status"]["phase"] == "Running", got["status"]
    await admin.delete(path)


def configmap_watches(server: ApiServer) -> float:
    """The configmaps watches the API server has open now (its apiserver_longrunning_requests)."""
    exposition = subprocess.run(
        ["kubectl", "--kubeconfig", str(server.kubeconfig), "get", "--raw", "/metrics"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return sum(
        sample.value
        for family in text_string_to_metric_families(exposition)
        if family.name == "apiserver_longrunning_requests"
        for sample in family.samples
        if sample.labels.get("verb") == "WATCH" and sample.labels.get("resource") == "configmaps"
    )


async def test_a_configmap_is_read_from_its_own_watch(
    agent: Agent, admin: KubeClient, apiserver: ApiServer, test_images: RigImages, monkeypatch
):
    """Upstream's Watch strategy on the node's own credentials: the Node authorizer lets the node watch
    the one ConfigMap its pod names (fieldSelector metadata.name); once that watch has listed, the pod
    worker's passes read it without a GET, a change reaches the pod's configMap volume through the watch,
    and the watch ends on the server when the pod goes. The pod names more ConfigMaps than the node's
    client has connections (64): a watch holds one each, and the node's other calls still get theirs."""
    name = f"live-{uuid.uuid4().hex[:6]}"
    cm_path = f"/api/v1/namespaces/default/configmaps/{name}"
    many = [f"{name}-{i}" for i in range(70)]
    for cm, data in [(name, {"value": "one"}), *((n, {"k": "x"}) for n in many)]:
        await admin.create("/api/v1/namespaces/default/configmaps", {"metadata": {"name": cm}, "data": data})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"watched-{uuid.uuid4().hex[:6]}", "namespace": "default"},
        "spec": {
            "nodeName": agent.cfg.node_name,
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "live", "configMap": {"name": name}},
                {"name": "many", "projected": {"sources": [{"configMap": {"name": n}} for n in many]}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": test_images.busybox_pinned,
                    "command": ["sleep", "3600"],
                    "volumeMounts": [{"name": "live", "mountPath": "/live"}],
                    "env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": name, "key": "value"}}}],
                }
            ],
        },
    }
    created = await admin.create("/api/v1/namespaces/default/pods", pod)
    uid, path = created["metadata"]["uid"], f"/api/v1/namespaces/default/pods/{created['metadata']['name']}"

    async def running():
        return (await admin.get(path)).get("status", {}).get("phase") == "Running"

    await wait_for_async(running, timeout=30.0, interval=0.2, what="the pod Running")
    watches = agent.objects.watches
    assert watches is not None and agent.pods is not None
    key = ("ConfigMap", "default", name)

    async def listed():
        return key in watches.held()

    await wait_for_async(listed, timeout=10.0, interval=0.1, what="the ConfigMap's watch listed")

    async def all_watched():
        return await asyncio.to_thread(configmap_watches, apiserver) == 1 + len(many)

    await wait_for_async(all_watched, timeout=20.0, interval=0.2, what="a watch open for each ConfigMap")
    gets: list[str] = []
    request = agent.client.request

    async def counted(method: str, where: str, **kwargs):
        if method == "GET" and where == cm_path:
            gets.append(where)
        return await request(method, where, **kwargs)

    monkeypatch.setattr(agent.client, "request", counted)
    worker = agent.pods.workers[uid]
    value = Path(agent.cfg.root_dir) / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "live" / "value"
    assert value.read_text() == "one"
    await admin.patch(cm_path, {"data": {"value": "two"}}, "application/merge-patch+json")

    async def refreshed():
        worker.wake()  # a pass, as the periodic sync makes one: it rewrites the volume from the reads
        return value.read_text() == "two"

    await wait_for_async(refreshed, timeout=10.0, interval=0.2, what="the new value in the volume")
    for _ in range(3):  # three more passes, each reading the ConfigMap for its volume
        syncs = worker.syncs
        worker.wake()

        async def passed(before: int = syncs) -> bool:
            return worker.syncs > before

        await wait_for_async(passed, timeout=10.0, interval=0.05, what="one more pass of the pod's worker")
    assert gets == []  # every pass read the watch's copy

    await admin.delete(path)

    async def unwatched():
        return key not in watches.watching() and await asyncio.to_thread(configmap_watches, apiserver) == 0

    await wait_for_async(unwatched, timeout=30.0, interval=0.2, what="the ConfigMap's watch ended")
    assert key not in agent.objects.cached()
    for gone in [name, *many]:
        await admin.delete(f"/api/v1/namespaces/default/configmaps/{gone}")
