"""The stats collectors without containerd: cgroup files (v1 and v2) in a temporary tree, the CPU rate
cache, /proc/net/dev parsing, the Summary JSON, the resource metrics exposition (parsed back with
prometheus_client's parser), and the provider over a fake CRI client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from agent.cri import CRIError, pb
from agent.server.stats import StatsHandlers
from agent.stats.cgroups import Cgroups, cgroupfs_path, container_cgroup
from agent.stats.cpurate import CpuRates
from agent.stats.cri_source import (
    WRITABLE_LAYER_PERIOD,
    latest_sandboxes,
    live_containers,
    parse_sandbox_info,
)
from agent.stats.host import parse_meminfo, parse_net_dev
from agent.stats.model import (
    ContainerStats,
    CpuStats,
    MemoryStats,
    NodeStats,
    PodRef,
    PodStats,
    Summary,
)
from agent.stats.provider import StatsConfig, StatsProvider
from agent.stats.resource_metrics import render
from agent.stats.summary import summary_json

MIB = 1 << 20


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_cgroup(
    root: Path, rel: str, cpu: int, usage: int, inactive: int, limit: int = 9223372036854771712
) -> None:
    write(root, f"cpuacct/{rel}/cpuacct.usage", f"{cpu}\n")
    write(root, f"memory/{rel}/memory.usage_in_bytes", f"{usage}\n")
    write(root, f"memory/{rel}/memory.limit_in_bytes", f"{limit}\n")
    write(
        root,
        f"memory/{rel}/memory.stat",
        f"cache 1\nrss 2\ntotal_rss 4096\ntotal_pgfault 77\ntotal_pgmajfault 3\ntotal_inactive_file {inactive}\n",
    )


def test_cgroup_v1_working_set_is_usage_less_inactive_file(tmp_path: Path):
    v1_cgroup(tmp_path, "kubepods/podu", cpu=5_000, usage=10 * MIB, inactive=3 * MIB, limit=64 * MIB)
    write(tmp_path, "pids/kubepods/podu/pids.current", "4\n")
    cg = Cgroups(tmp_path)
    assert not cg.unified
    usage = cg.usage("/kubepods/podu")
    assert usage is not None
    assert (usage.cpu_usage_ns, usage.memory_usage, usage.working_set) == (5_000, 10 * MIB, 7 * MIB)
    assert (usage.rss, usage.page_faults, usage.major_page_faults, usage.memory_limit) == (
        4096,
        77,
        3,
        64 * MIB,
    )
    assert cg.pids("/kubepods/podu") == 4
    v1_cgroup(tmp_path, "free", cpu=1, usage=MIB, inactive=2 * MIB)
    free = cg.usage("free")
    assert (
        free is not None and free.working_set == 0 and free.memory_limit is None
    )  # never below 0; unlimited
    assert cg.usage("/gone") is None


def test_cgroup_v2_reads_the_unified_files(tmp_path: Path):
    write(tmp_path, "cgroup.controllers", "cpu memory pids\n")
    write(tmp_path, "kubepods/podu/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    write(tmp_path, "kubepods/podu/memory.current", f"{8 * MIB}\n")
    write(tmp_path, "kubepods/podu/memory.max", "max\n")
    write(tmp_path, "kubepods/podu/memory.stat", f"anon 123\ninactive_file {MIB}\npgfault 9\npgmajfault 1\n")
    cg = Cgroups(tmp_path)
    usage = cg.usage("/kubepods/podu")
    assert usage is not None and cg.unified
    assert (usage.cpu_usage_ns, usage.working_set, usage.rss, usage.memory_limit) == (
        1_500_000,
        7 * MIB,
        123,
        None,
    )
    assert (usage.page_faults, usage.major_page_faults) == (9, 1)


def test_systemd_slices_expand_to_their_path():
    assert cgroupfs_path("kubepods-burstable-pod1_2.slice") == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice"
    )
    assert cgroupfs_path("/kubepods/burstable/pod1") == "/kubepods/burstable/pod1"
    assert container_cgroup("/kubepods/burstable/pod1", "c1") == "/kubepods/burstable/pod1/c1"
    assert container_cgroup("kubepods-pod1.slice", "c1") == (
        "/kubepods.slice/kubepods-pod1.slice/cri-containerd-c1.scope"
    )


def test_cpu_rate_needs_two_samples_and_restarts_on_a_counter_reset():
    now = [0.0]
    rates = CpuRates(clock=lambda: now[0])
    assert rates.update("c", 1_000_000_000, 0) is None  # the first sample
    assert rates.update("c", 2_000_000_000, 500_000_000) == 500_000_000  # half a core over 1 s
    assert rates.update("c", 2_050_000_000, 600_000_000) == 500_000_000  # 50 ms later: the known rate
    assert rates.update("c", 3_000_000_000, 100_000_000) is None  # went backwards: a new container
    assert rates.update("c", 5_000_000_000, 2_100_000_000) == 1_000_000_000
    now[0] = 500.0
    rates.update("d", 1, 1)
    rates.sweep()
    assert len(rates) == 1  # "c" was not seen for longer than the cache period


def test_net_dev_skips_loopback_and_veths():
    text = (
        "Inter-|   Receive                                                |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
        "    lo:  100 1 0 0 0 0 0 0  100 1 0 0 0 0 0 0\n"
        "  eth0: 2000 20 1 0 0 0 0 0 3000 30 2 0 0 0 0 0\n"
        "veth12: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n"
    )
    (eth0,) = parse_net_dev(text)
    assert (eth0.name, eth0.rx_bytes, eth0.rx_errors, eth0.tx_bytes, eth0.tx_errors) == (
        "eth0",
        2000,
        1,
        3000,
        2,
    )
    assert parse_meminfo("MemTotal:  1000 kB\nHugePages_Total: 0\n") == {
        "MemTotal": 1024000,
        "HugePages_Total": 0,
    }


def sample_summary() -> Summary:
    container = ContainerStats(
        "c",
        "cid",
        1_700_000_000.0,
        CpuStats(1_700_000_100.25, 5_000_000_000, 250_000_000),
        MemoryStats(1_700_000_100.25, working_set_bytes=42, usage_bytes=50),
    )
    pod = PodStats(
        PodRef("p", "ns", "u"),
        1_699_999_990.0,
        containers=(container,),
        cpu=CpuStats(1_700_000_100.5, 6_000_000_000),
        memory=MemoryStats(1_700_000_100.5, working_set_bytes=64),
    )
    node = NodeStats(
        "n1",
        1_600_000_000.0,
        CpuStats(1_700_000_101.0, 9_000_000_000),
        MemoryStats(1_700_000_101.0, working_set_bytes=MIB),
    )
    return Summary(node, (pod,))


def test_resource_metrics_are_upstreams_series_with_their_timestamps():
    families = {f.name: f for f in text_string_to_metric_families(render(sample_summary()).decode())}
    labels = {"container": "c", "pod": "p", "namespace": "ns"}
    (cpu,) = families["container_cpu_usage_seconds"].samples
    assert families["container_cpu_usage_seconds"].type == "counter"
    assert (cpu.name, cpu.labels, cpu.value, cpu.timestamp) == (
        "container_cpu_usage_seconds_total",
        labels,
        5.0,
        1_700_000_100.25,
    )
    (start,) = families["container_start_time_seconds"].samples
    assert (start.value, start.timestamp) == (1_700_000_000.0, None)
    (mem,) = families["container_memory_working_set_bytes"].samples
    assert (mem.value, mem.timestamp) == (42, 1_700_000_100.25)
    (pod_cpu,) = families["pod_cpu_usage_seconds"].samples
    assert (pod_cpu.labels, pod_cpu.value) == ({"pod": "p", "namespace": "ns"}, 6.0)
    assert families["node_cpu_usage_seconds"].samples[0].value == 9.0
    assert families["node_memory_working_set_bytes"].samples[0].value == MIB
    (error,) = families["resource_scrape_error"].samples
    assert (error.value, error.timestamp) == (0, None)
    assert (
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds"
        in render(sample_summary()).decode()
    )


def test_a_failed_pass_is_resource_scrape_error_alone():
    families = list(text_string_to_metric_families(render(None).decode()))
    assert [(f.name, f.samples[0].value) for f in families] == [("resource_scrape_error", 1)]


def test_summary_json_is_upstreams_shape_and_leaves_unknowns_out():
    doc = summary_json(sample_summary())
    pod = doc["pods"][0]
    assert pod["podRef"] == {"name": "p", "namespace": "ns", "uid": "u"}
    assert pod["startTime"] == "2023-11-14T22:13:10Z"
    assert pod["containers"][0]["cpu"] == {
        "time": "2023-11-14T22:15:00Z",
        "usageNanoCores": 250_000_000,
        "usageCoreNanoSeconds": 5_000_000_000,
    }
    assert pod["containers"][0]["memory"] == {
        "time": "2023-11-14T22:15:00Z",
        "usageBytes": 50,
        "workingSetBytes": 42,
    }
    assert "usageNanoCores" not in pod["cpu"]  # not known yet: omitted, not 0
    assert doc["node"]["nodeName"] == "n1" and "fs" not in doc["node"]


# -- the provider over a fake CRI --------------------------------------------------------------------


class FakeCRI:
    def __init__(self) -> None:
        self.fail = False
        labels = {
            "io.kubernetes.pod.name": "web",
            "io.kubernetes.pod.namespace": "ns",
            "io.kubernetes.pod.uid": "u1",
        }
        meta = pb.PodSandboxMetadata(name="web", namespace="ns", uid="u1")
        self.sandboxes = [
            pb.PodSandbox(id="old", metadata=meta, state=pb.SANDBOX_NOTREADY, created_at=1, labels=labels),
            pb.PodSandbox(
                id="sb", metadata=meta, state=pb.SANDBOX_READY, created_at=2_000_000_000, labels=labels
            ),
        ]
        self.containers = [
            pb.Container(
                id="dead",
                pod_sandbox_id="sb",
                metadata=pb.ContainerMetadata(name="app"),
                state=pb.CONTAINER_EXITED,
                created_at=3_000_000_000,
            ),
            pb.Container(
                id="live",
                pod_sandbox_id="sb",
                metadata=pb.ContainerMetadata(name="app"),
                state=pb.CONTAINER_RUNNING,
                created_at=4_000_000_000,
            ),
        ]
        self.cpu = 1_000_000_000
        self.ts = 10_000_000_000
        self.status_calls = 0
        self.stats_calls = 0
        self.image_fs_calls = 0
        self.cgroup_parent = ""

    def _stats(self, cid: str) -> pb.ContainerStats:
        return pb.ContainerStats(
            attributes=pb.ContainerAttributes(id=cid, metadata=pb.ContainerMetadata(name="app")),
            cpu=pb.CpuUsage(timestamp=self.ts, usage_core_nano_seconds=pb.UInt64Value(value=self.cpu)),
            memory=pb.MemoryUsage(timestamp=self.ts, working_set_bytes=pb.UInt64Value(value=3 * MIB)),
        )

    async def list_pod_sandbox(self) -> list[pb.PodSandbox]:
        if self.fail:
            raise CRIError("ListPodSandbox", None, "runtime down")
        return self.sandboxes

    async def list_containers(self) -> list[pb.Container]:
        return self.containers

    async def list_container_stats(self) -> list[pb.ContainerStats]:
        self.stats_calls += 1
        stats = [self._stats("dead"), self._stats("live")]
        stats[1].writable_layer.used_bytes.value = 8192
        return stats

    async def image_fs_info(self) -> pb.ImageFsInfoResponse:
        self.image_fs_calls += 1
        return pb.ImageFsInfoResponse()

    async def pod_sandbox_status(self, sandbox_id: str, verbose: bool = False) -> Any:
        self.status_calls += 1
        info = json.dumps({"pid": 0, "config": {"linux": {"cgroup_parent": self.cgroup_parent}}})
        return pb.PodSandboxStatusResponse(info={"info": info})


def test_terminated_pods_and_containers_are_left_out():
    cri = FakeCRI()
    assert [s.id for s in latest_sandboxes(cri.sandboxes)] == ["sb"]
    assert [c.id for c in live_containers(cri.containers)] == ["live"]
    exited = [cri.containers[0]]
    assert [c.id for c in live_containers(exited)] == ["dead"]  # none running: the newest
    info = parse_sandbox_info(
        {"info": '{"pid": 42, "config": {"linux": {"cgroup_parent": "/kubepods/podx"}}}'}
    )
    assert (info.pid, info.cgroup_parent) == (42, "/kubepods/podx")
    assert parse_sandbox_info({}).pid is None


async def test_provider_without_a_pod_cgroup_sums_the_containers(tmp_path: Path):
    cri = FakeCRI()
    v1_cgroup(tmp_path / "cg", "", cpu=7, usage=2 * MIB, inactive=0)
    provider = StatsProvider(
        cri,  # type: ignore[arg-type]
        StatsConfig("n1", root_dir=str(tmp_path), pod_logs_dir=str(tmp_path)),
        cgroups=Cgroups(tmp_path / "cg"),
    )
    first = await provider.summary(only_cpu_and_memory=True)
    (pod,) = first.pods
    (app,) = pod.containers
    assert (pod.ref, app.id, app.start_time) == (PodRef("web", "ns", "u1"), "live", 4.0)
    assert app.cpu is not None and app.cpu.usage_nano_cores is None  # one sample so far
    cri.cpu, cri.ts = 3_000_000_000, 14_000_000_000  # 2 s of CPU over 4 s
    second = await provider.summary(only_cpu_and_memory=True)
    (pod,) = second.pods
    assert pod.containers[0].cpu is not None and pod.containers[0].cpu.usage_nano_cores == 500_000_000
    assert pod.cpu is not None and (pod.cpu.usage_core_nano_seconds, pod.cpu.usage_nano_cores) == (
        3_000_000_000,
        500_000_000,
    )
    assert pod.memory is not None and pod.memory.working_set_bytes == 3 * MIB
    assert second.node.cpu is not None and second.node.cpu.usage_core_nano_seconds == 7
    assert second.node.memory is not None and second.node.memory.working_set_bytes == 2 * MIB
    assert cri.status_calls == 1  # the sandbox's verbose status is asked once


async def test_containers_read_their_own_cgroups_and_ask_cri_only_for_the_layers(
    tmp_path: Path,
):
    cri = FakeCRI()
    cri.cgroup_parent = "/kubepods/podu1"
    cg = tmp_path / "cg"
    v1_cgroup(cg, "", cpu=7, usage=2 * MIB, inactive=0)
    v1_cgroup(cg, "kubepods/podu1", cpu=5_000, usage=12 * MIB, inactive=2 * MIB)
    v1_cgroup(cg, "kubepods/podu1/live", cpu=4_000, usage=10 * MIB, inactive=3 * MIB, limit=64 * MIB)
    clock = [100.0]
    provider = StatsProvider(
        cri,  # type: ignore[arg-type]
        StatsConfig("n1", root_dir=str(tmp_path), pod_logs_dir=str(tmp_path)),
        cgroups=Cgroups(cg),
        clock=lambda: clock[0],
    )
    provider._source.clock = lambda: clock[0]
    (pod,) = (await provider.summary(only_cpu_and_memory=True)).pods
    (app,) = pod.containers
    assert cri.stats_calls == 0  # CPU and memory come from the cgroups alone
    assert app.cpu is not None and app.cpu.usage_core_nano_seconds == 4_000  # not CRI's 1e9
    assert app.memory is not None and app.memory.working_set_bytes == 7 * MIB  # usage - inactive_file
    assert app.memory.available_bytes == 57 * MIB and app.memory.usage_bytes == 10 * MIB
    v1_cgroup(cg, "kubepods/podu1/live", cpu=2_000_004_000, usage=10 * MIB, inactive=3 * MIB)
    clock[0] = 104.0
    (pod,) = (await provider.summary()).pods
    (app,) = pod.containers
    assert app.cpu is not None and app.cpu.usage_nano_cores == 500_000_000  # 2 s of CPU over 4 s
    assert app.rootfs is not None and app.rootfs.used_bytes == 8192  # the writable layer: from CRI
    assert cri.stats_calls == 1
    clock[0] = 104.0 + WRITABLE_LAYER_PERIOD - 1
    await provider.summary()
    assert (cri.stats_calls, cri.image_fs_calls) == (1, 1)  # remembered, as containerd's own sync
    clock[0] = 104.0 + WRITABLE_LAYER_PERIOD
    await provider.summary()
    assert (cri.stats_calls, cri.image_fs_calls) == (2, 2)


@pytest.fixture
async def stats_client(tmp_path: Path):
    cri = FakeCRI()
    provider = StatsProvider(cri, StatsConfig("n1", str(tmp_path), str(tmp_path)), cgroups=Cgroups(tmp_path))  # type: ignore[arg-type]
    app = web.Application()
    StatsHandlers(provider).routes(app)
    async with TestClient(TestServer(app)) as client:
        yield client, cri


async def test_handlers_answer_upstreams_errors(stats_client):
    client, cri = stats_client
    resp = await client.get("/stats/summary", params={"only_cpu_and_memory": "true"})
    assert resp.status == 200 and (await resp.json())["pods"][0]["podRef"]["name"] == "web"
    resp = await client.get("/stats/summary", params={"only_cpu_and_memory": "yes"})  # only "true" counts
    assert "network" in (await resp.json())["node"] or "fs" in (await resp.json())["node"]
    cri.fail = True
    resp = await client.get("/stats/summary")
    assert resp.status == 500 and (await resp.text()).startswith("Internal Error: ")
    resp = await client.get("/metrics/resource")
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "resource_scrape_error 1.0" in await resp.text()


# -- the kubelet's own metrics and cadvisor's series ----------------------------------------------------


def test_kubelet_metrics_have_upstreams_names_labels_and_buckets():
    from agent.metrics import RUNTIME_BUCKETS, KubeletMetrics

    m = KubeletMetrics("n1")
    m.runtime_operation("list_podsandbox", 0.002, failed=False)
    m.runtime_operation("run_podsandbox", 0.3, failed=True)
    m.relisted(1000.0, 0.01, 2, {"running": 3, "exited": 1})
    m.relisted(1001.0, 0.02, 1, {"running": 1})
    m.pod_synced("create", 0.2)
    m.pod_started(1.5)
    families = {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}
    ops = {s.labels["operation_type"]: s.value for s in families["kubelet_runtime_operations"].samples}
    assert ops == {"list_podsandbox": 1, "run_podsandbox": 1}
    errors = families["kubelet_runtime_operations_errors"].samples
    assert [(s.labels, s.value) for s in errors] == [({"operation_type": "run_podsandbox"}, 1)]
    buckets = [
        s.labels["le"]
        for s in families["kubelet_runtime_operations_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["operation_type"] == "list_podsandbox"
    ]
    assert len(buckets) == len(RUNTIME_BUCKETS) + 1 and float(buckets[0]) == 0.005
    assert families["kubelet_running_pods"].samples[0].value == 1
    states = {s.labels["container_state"]: s.value for s in families["kubelet_running_containers"].samples}
    assert states == {"created": 0, "running": 1, "exited": 0, "unknown": 0}  # a state gone is 0 again
    interval = {s.name: s.value for s in families["kubelet_pleg_relist_interval_seconds"].samples}
    assert interval["kubelet_pleg_relist_interval_seconds_count"] == 1
    assert interval["kubelet_pleg_relist_interval_seconds_sum"] == 1.0  # start to start
    worker = [s for s in families["kubelet_pod_worker_duration_seconds"].samples if s.name.endswith("_count")]
    assert [(s.labels, s.value) for s in worker] == [({"operation_type": "create"}, 1)]
    assert [(s.labels, s.value) for s in families["kubelet_node_name"].samples] == [({"node": "n1"}, 1)]
    assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)
    assert (
        "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox"
        in m.exposition().decode()
    )


def test_cadvisor_series_carry_cadvisors_labels():
    from agent.stats.cadvisor_metrics import render, series_of
    from agent.stats.model import FsStats, InterfaceStats, NetworkStats

    base = sample_summary()
    pod = base.pods[0]
    c = pod.containers[0]
    container = ContainerStats(
        c.name,
        c.id,
        c.start_time,
        c.cpu,
        c.memory,
        FsStats(1_700_000_100.0, used_bytes=4096),
        image="busybox",
        rootfs_device="/dev/vda",
    )
    net = NetworkStats(1_700_000_100.0, (InterfaceStats("eth0", 10, 0, 20, 0),))
    pod = PodStats(
        pod.ref,
        pod.start_time,
        cgroup="/kubepods/podu",
        containers=(container,),
        cpu=pod.cpu,
        memory=pod.memory,
        network=net,
    )
    text = render(series_of(Summary(base.node, (pod,)))).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    cpu = {s.labels["id"]: s for s in families["container_cpu_usage_seconds"].samples}
    assert cpu["/kubepods/podu/cid"].labels == {
        "container": "c",
        "cpu": "total",
        "id": "/kubepods/podu/cid",
        "image": "busybox",
        "name": "cid",
        "namespace": "ns",
        "pod": "p",
    }
    assert cpu["/"].labels["pod"] == "" and cpu["/"].value == 9.0
    (rx,) = families["container_network_receive_bytes"].samples
    assert (rx.labels["interface"], rx.labels["id"], rx.labels["container"], rx.value) == (
        "eth0",
        "/kubepods/podu",
        "",
        10,
    )
    (fs,) = families["container_fs_usage_bytes"].samples
    assert (fs.labels["device"], fs.value) == ("/dev/vda", 4096)
    usage = {s.labels["id"]: s.value for s in families["container_memory_usage_bytes"].samples}
    assert usage == {"/kubepods/podu/cid": 50}


def test_mountinfo_finds_the_device_of_a_path():
    from agent.stats.host import device_of, parse_mountinfo

    text = (
        "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "30 22 0:26 / /var/lib/containerd rw - xfs /dev/vdb rw\n"
        "31 22 0:27 / /var/lib/containerd2 rw - tmpfs tmpfs rw\n"
    )
    mounts = parse_mountinfo(text)
    assert device_of("/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs", mounts) == "/dev/vdb"
    assert device_of("/var/lib/containerd2x", mounts) == "/dev/vda"
