"""The kubelet API's /stats/summary and /metrics/resource against the real agent and containerd: a pod
spinning under a CPU limit shows usageCoreNanoSeconds rising and usageNanoCores close to what its own
cgroup's counter says over the same interval; working sets agree with the cgroup's memory files; an
emptyDir's bytes are counted; the metrics parse with prometheus_client's parser; callers without
nodes/stats or nodes/metrics get upstream's 401/403.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.app import Agent
from agent.cri import pb
from agent.stats import host
from agent.stats.cgroups import Cgroups, parse_proc_cgroup
from agent.stats.syscontainers import unix_socket_peer
from e2e.waiting import wait_for_async
from kubeclient.client import KubeClient
from pykubelet.rig.images import RigImages
from tests.agent.test_agent_api import (  # noqa: F401 - fixtures
    admin,
    agent,
    apiserver,
    client_pki,
    kubelet_tls,
    own_containerd,
)

pytestmark = pytest.mark.integration

# The agent tests' poll: a coroutine check every 0.2 s within its bound.
wait_until = functools.partial(wait_for_async, interval=0.2)

CPU_LIMIT_CORES = 0.2
MIB = 1 << 20


def spinner(node: str, name: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "initContainers": [
                {
                    "name": "fill",
                    "image": image,
                    "command": ["dd", "if=/dev/zero", "of=/scratch/blob", "bs=1048576", "count=3"],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            "containers": [
                {
                    "name": "spin",
                    "image": image,
                    "command": ["sh", "-c", "while :; do :; done"],
                    "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}},
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
        },
    }


def cgroup_cpu_ns(cgroups: Cgroups, path: str) -> int:
    usage = cgroups.usage(path)
    assert usage is not None and usage.cpu_usage_ns is not None, path
    return usage.cpu_usage_ns


def pod_entry(summary: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in summary["pods"] if p["podRef"]["name"] == name), None)


async def test_summary_and_resource_metrics_follow_the_cgroups(
    agent: Agent,  # noqa: F811 - the fixtures of test_agent_api
    admin: KubeClient,  # noqa: F811
    test_images: RigImages,
    client_pki: dict[str, Path],  # noqa: F811
):
    name = f"spin-{uuid.uuid4().hex[:6]}"
    await admin.create(
        "/api/v1/namespaces/default/pods", spinner(agent.cfg.node_name, name, test_images.busybox_pinned)
    )
    assert agent.server is not None and agent.server.stats is not None
    base = f"https://127.0.0.1:{agent.server.port}"
    tls = kubelet_tls(client_pki)
    cgroups = Cgroups()
    async with aiohttp.ClientSession() as http:

        async def summary(**params: str) -> dict[str, Any]:
            async with http.get(f"{base}/stats/summary", params=params, ssl=tls) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()

        async def spinning() -> dict[str, Any] | None:
            pod = pod_entry(await summary(), name)
            spin = [c for c in (pod or {}).get("containers", []) if c["name"] == "spin"]
            return pod if spin and spin[0].get("cpu", {}).get("usageNanoCores") is not None else None

        async def initialized() -> bool:
            got = await admin.get(f"/api/v1/namespaces/default/pods/{name}")
            conditions = (got.get("status") or {}).get("conditions") or []
            return any(c["type"] == "Initialized" and c["status"] == "True" for c in conditions)

        # The volume's du is remembered for a minute from the first pass that sees the pod (upstream's
        # volumeStatsAggPeriod): the first pass comes after the init container filled it.
        await wait_until(initialized, timeout=60)
        pod = await wait_until(spinning, timeout=60)
        uid = pod["podRef"]["uid"]
        assert pod["podRef"] == {"name": name, "namespace": "default", "uid": uid}
        # The pod's cgroup as the stats provider found it (the sandbox's cgroup parent), and the
        # container's below it, as runc makes it with the cgroupfs driver.
        pod_cgroup = next(p.cgroup for p in (await agent.server.stats.summary()).pods if p.ref.uid == uid)
        assert pod_cgroup.endswith(f"/pod{uid}")
        container_id = next(
            c.id
            for p in (await agent.server.stats.summary()).pods
            if p.ref.uid == uid
            for c in p.containers
            if c.name == "spin"
        )
        container_cgroup = f"{pod_cgroup}/{container_id}"

        # usageNanoCores against the cgroup's own counter over the same interval.
        t0, c0 = time.time(), cgroup_cpu_ns(cgroups, container_cgroup)
        first = pod_entry(await summary(), name)
        assert first is not None
        await asyncio.sleep(2.0)  # the interval the rate is measured over
        second = pod_entry(await summary(), name)
        t1, c1 = time.time(), cgroup_cpu_ns(cgroups, container_cgroup)
        assert second is not None
        spin0 = next(c for c in first["containers"] if c["name"] == "spin")
        spin1 = next(c for c in second["containers"] if c["name"] == "spin")
        used0, used1 = spin0["cpu"]["usageCoreNanoSeconds"], spin1["cpu"]["usageCoreNanoSeconds"]
        assert c0 <= used0 < used1 <= c1  # rising, and within the cgroup's counter read around it
        cgroup_rate = (c1 - c0) / (t1 - t0)  # nano cores
        assert 0.5 * CPU_LIMIT_CORES * 1e9 < cgroup_rate < 1.2 * CPU_LIMIT_CORES * 1e9
        assert abs(spin1["cpu"]["usageNanoCores"] - cgroup_rate) < 0.35 * cgroup_rate
        assert second["cpu"]["usageCoreNanoSeconds"] >= used1  # the pod's cgroup holds the container's
        assert abs(second["cpu"]["usageNanoCores"] - cgroup_rate) < 0.35 * cgroup_rate

        # Working sets: usage less inactive file pages, from the cgroup's own files.
        mem = cgroups.usage(pod_cgroup)
        assert mem is not None and mem.working_set is not None
        assert abs(second["memory"]["workingSetBytes"] - mem.working_set) < MIB
        cmem = cgroups.usage(container_cgroup)
        assert cmem is not None and cmem.working_set is not None
        assert abs(spin1["memory"]["workingSetBytes"] - cmem.working_set) < MIB
        assert spin1["memory"]["availableBytes"] + spin1["memory"]["workingSetBytes"] == 64 * MIB
        assert spin1["memory"]["rssBytes"] > 0 and spin1["memory"]["pageFaults"] > 0

        # Network from the pod's namespace, the emptyDir the init container filled, ephemeral storage.
        assert second["network"]["name"] == "eth0" and second["network"]["rxBytes"] >= 0
        assert [i["name"] for i in second["network"]["interfaces"]] == ["eth0"]
        scratch = next(v for v in second["volume"] if v["name"] == "scratch")
        assert scratch["usedBytes"] >= 3 * MIB and scratch["capacityBytes"] > scratch["usedBytes"]
        assert second["ephemeral-storage"]["usedBytes"] >= 3 * MIB
        assert second["process_stats"]["process_count"] >= 2  # pause + sh
        assert "logs" in spin1 and "rootfs" in spin1
        # The kubelet's cgroup is this process's (the agent runs in the test), shared with whatever else
        # runs in it (under CI, every lane of the suite): its working set and page cache move by tens of
        # MiB while a summary is made, so the figure that proves it is the cgroup's is the CPU counter,
        # which only rises: read on both sides of the summary, it must fall between the two readings.
        own = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
        kubelet_before = cgroups.usage(*own)
        full = await summary()
        kubelet_after = cgroups.usage(*own)
        node = full["node"]
        assert node["nodeName"] == agent.cfg.node_name
        assert node["cpu"]["usageCoreNanoSeconds"] > 0 and node["memory"]["workingSetBytes"] > 0
        assert node["fs"]["capacityBytes"] > 0 and node["runtime"]["imageFs"]["usedBytes"] >= 0
        # System containers: the kubelet (this process's cgroup), the runtime (containerd's, found as
        # the peer of its CRI socket) and the pods, each with its cgroup's figures.
        system = {s["name"]: s for s in node["systemContainers"]}
        assert list(system) == ["kubelet", "runtime", "pods"]
        assert kubelet_before is not None and kubelet_before.cpu_usage_ns is not None
        assert kubelet_after is not None and kubelet_after.cpu_usage_ns is not None
        kubelet_cpu = system["kubelet"]["cpu"]["usageCoreNanoSeconds"]
        assert kubelet_before.cpu_usage_ns <= kubelet_cpu <= kubelet_after.cpu_usage_ns
        assert system["kubelet"]["memory"]["workingSetBytes"] > 0
        runtime_pid = unix_socket_peer(agent.cfg.container_runtime_endpoint)
        assert runtime_pid is not None and runtime_pid != os.getpid()
        assert Path(f"/proc/{runtime_pid}/comm").read_text().strip() == "containerd"
        assert system["runtime"]["cpu"]["usageCoreNanoSeconds"] > 0
        assert "fs" not in system["runtime"] and "rootfs" not in system["pods"]
        # The node's swap is /proc/meminfo's (SwapTotal - SwapFree in use, SwapFree left).
        meminfo = host.meminfo()
        assert node["swap"]["swapUsageBytes"] == meminfo["SwapTotal"] - meminfo["SwapFree"]
        assert node["swap"]["swapAvailableBytes"] == meminfo["SwapFree"]

        # only_cpu_and_memory: no network, fs or volumes.
        lean = await summary(only_cpu_and_memory="true")
        lean_pod = pod_entry(lean, name)
        assert lean_pod is not None and set(lean_pod) - {"swap"} == {
            "podRef",
            "startTime",
            "containers",
            "cpu",
            "memory",
        }
        assert "fs" not in lean["node"] and "network" not in lean["node"]

        # /metrics/resource parses, and says what the Summary says.
        async with http.get(f"{base}/metrics/resource", ssl=tls) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = await resp.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {
        "node_cpu_usage_seconds",
        "node_memory_working_set_bytes",
        "container_cpu_usage_seconds",
        "container_memory_working_set_bytes",
        "container_start_time_seconds",
        "pod_cpu_usage_seconds",
        "pod_memory_working_set_bytes",
        "resource_scrape_error",
    } <= set(families)
    labels = {"container": "spin", "pod": name, "namespace": "default"}
    cpu = [s for s in families["container_cpu_usage_seconds"].samples if s.labels == labels]
    assert len(cpu) == 1 and cpu[0].value * 1e9 >= used1 and cpu[0].timestamp is not None
    assert abs(cpu[0].timestamp - time.time()) < 30
    start = [s for s in families["container_start_time_seconds"].samples if s.labels == labels]
    assert len(start) == 1 and start[0].timestamp is None and abs(start[0].value - time.time()) < 120
    assert families["resource_scrape_error"].samples[0].value == 0
    await admin.delete(f"/api/v1/namespaces/default/pods/{name}")


async def test_stats_and_metrics_are_authorized_as_nodes_subresources(
    agent: Agent,  # noqa: F811 - the fixtures of test_agent_api
    admin: KubeClient,  # noqa: F811
):
    """No credentials: 401. A service account without rights: 403 naming stats or metrics. Bound to a
    role that grants nodes/stats only, /stats/summary answers and /metrics/resource stays forbidden."""
    account = f"scraper-{uuid.uuid4().hex[:6]}"
    await admin.create("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": account}})
    issued = await admin.create(
        f"/api/v1/namespaces/default/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    auth = {"Authorization": f"Bearer {issued['status']['token']}"}
    assert agent.server is not None
    base = f"https://127.0.0.1:{agent.server.port}"
    user = f"system:serviceaccount:default:{account}"
    async with aiohttp.ClientSession() as http:
        for path in ("/stats/summary", "/metrics/resource"):
            async with http.get(base + path, ssl=kubelet_tls()) as resp:
                assert (resp.status, await resp.text()) == (401, "Unauthorized")
        async with http.get(f"{base}/stats/summary", ssl=kubelet_tls(), headers=auth) as resp:
            assert (resp.status, await resp.text()) == (
                403,
                f"Forbidden (user={user}, verb=get, resource=nodes, subresource=stats)",
            )
        async with http.get(f"{base}/metrics/resource", ssl=kubelet_tls(), headers=auth) as resp:
            assert (resp.status, await resp.text()) == (
                403,
                f"Forbidden (user={user}, verb=get, resource=nodes, subresource=metrics)",
            )
        role = f"{account}-stats"
        await admin.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "metadata": {"name": role},
                "rules": [{"apiGroups": [""], "resources": ["nodes/stats"], "verbs": ["get"]}],
            },
        )
        await admin.create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
            },
        )

        async def allowed() -> bool:
            async with http.get(f"{base}/stats/summary", ssl=kubelet_tls(), headers=auth) as resp:
                return resp.status == 200 and "node" in await resp.json()

        await wait_until(allowed, timeout=20)
        async with http.get(f"{base}/metrics/resource", ssl=kubelet_tls(), headers=auth) as resp:
            assert resp.status == 403
    await admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
    await admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
    await admin.delete(f"/api/v1/namespaces/default/serviceaccounts/{account}")


def samples(text: str, family: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) if f.name == family for s in f.samples]


async def test_kubelet_metrics_and_cadvisor_series(
    agent: Agent,  # noqa: F811 - the fixtures of test_agent_api
    admin: KubeClient,  # noqa: F811
    test_images: RigImages,
    client_pki: dict[str, Path],  # noqa: F811
):
    """/metrics: kubelet_running_pods is what CRI says (ready sandboxes), the pod worker, the pod start,
    the relist and the runtime calls are counted; /metrics/cadvisor has the pod's core series."""
    name = f"sleeper-{uuid.uuid4().hex[:6]}"
    pod = spinner(agent.cfg.node_name, name, test_images.busybox_pinned)
    pod["spec"]["containers"][0]["command"] = ["sleep", "3600"]
    await admin.create("/api/v1/namespaces/default/pods", pod)
    assert agent.server is not None and agent.cri is not None
    base = f"https://127.0.0.1:{agent.server.port}"
    tls = kubelet_tls(client_pki)
    cri = agent.cri

    async def running() -> bool:
        got = await admin.get(f"/api/v1/namespaces/default/pods/{name}")
        return (got.get("status") or {}).get("phase") == "Running"

    await wait_until(running, timeout=60)
    async with aiohttp.ClientSession() as http:

        async def metrics(path: str = "/metrics") -> str:
            async with http.get(base + path, ssl=tls) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.text()

        async def agree_with_cri() -> str | None:
            ready = {sb.metadata.uid for sb in await cri.list_pod_sandbox(state=pb.SANDBOX_READY)}
            running = await cri.list_containers(state=pb.CONTAINER_RUNNING)
            text = await metrics()
            (count,) = samples(text, "kubelet_running_pods")
            states = {
                s.labels["container_state"]: s.value for s in samples(text, "kubelet_running_containers")
            }
            agreed = count.value == len(ready) and states["running"] == len(running)
            return text if agreed and ready and running else None

        # The relist (about 1 s) catches up with what CRI says now.
        text = await wait_until(agree_with_cri, timeout=10)
        assert [(s.labels, s.value) for s in samples(text, "kubelet_node_name")] == [
            ({"node": agent.cfg.node_name}, 1.0)
        ]
        start_count = [
            s for s in samples(text, "kubelet_pod_start_duration_seconds") if s.name.endswith("_count")
        ]
        assert start_count[0].value >= 1
        worker = {
            s.labels["operation_type"]: s.value
            for s in samples(text, "kubelet_pod_worker_duration_seconds")
            if s.name.endswith("_count")
        }
        assert worker["create"] >= 1 and worker.get("sync", 0) >= 1
        relists = [
            s for s in samples(text, "kubelet_pleg_relist_duration_seconds") if s.name.endswith("_count")
        ]
        assert relists[0].value >= 1
        ops = {s.labels["operation_type"]: s.value for s in samples(text, "kubelet_runtime_operations")}
        assert ops["list_podsandbox"] >= 1 and ops["run_podsandbox"] >= 1 and ops["create_container"] >= 1
        assert not any(
            s.name.endswith("_created") for f in text_string_to_metric_families(text) for s in f.samples
        )
        before = ops["list_podsandbox"]

        async def counted() -> bool:
            ops = {
                s.labels["operation_type"]: s.value
                for s in samples(await metrics(), "kubelet_runtime_operations")
            }
            return ops["list_podsandbox"] > before

        await wait_until(counted, timeout=10)  # the relist goes on, and so does its count

        cadvisor = await metrics("/metrics/cadvisor")
    uid = (await admin.get(f"/api/v1/namespaces/default/pods/{name}"))["metadata"]["uid"]
    mine = [s for s in samples(cadvisor, "container_cpu_usage_seconds") if s.labels.get("pod") == name]
    by_container = {s.labels["container"]: s for s in mine}
    spin = by_container["spin"]
    assert spin.labels["id"].endswith(f"/pod{uid}/{spin.labels['name']}") and spin.labels["cpu"] == "total"
    assert spin.labels["image"] and spin.labels["namespace"] == "default" and spin.timestamp is not None
    assert by_container[""].labels["id"].endswith(f"/pod{uid}")  # the pod's own cgroup
    rx = [s for s in samples(cadvisor, "container_network_receive_bytes") if s.labels.get("pod") == name]
    assert [s.labels["interface"] for s in rx] == ["eth0"]
    for family in (
        "container_memory_working_set_bytes",
        "container_memory_usage_bytes",
        "container_memory_rss",
    ):
        assert any(
            s.labels.get("container") == "spin" and s.labels.get("pod") == name
            for s in samples(cadvisor, family)
        )
    fs = [s for s in samples(cadvisor, "container_fs_usage_bytes") if s.labels.get("pod") == name]
    assert fs and fs[0].labels["device"]
    root = [s for s in samples(cadvisor, "container_cpu_usage_seconds") if s.labels["id"] == "/"]
    assert len(root) == 1 and root[0].value > 0
    await admin.delete(f"/api/v1/namespaces/default/pods/{name}")
