"""Swap and the node's system containers in the Summary, without containerd: swap read as cadvisor reads
it (v2 memory.swap.current/max; v1 memsw minus memory, only where swap is accounted), the node's from
/proc/meminfo, upstream's JSON (`swap` with swapUsageBytes/swapAvailableBytes, the limit's remainder
only when there is a limit) and /metrics/resource's swap series; the kubelet's and the runtime's
cgroups found from /proc/<pid>/cgroup and the CRI socket's peer."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.stats.cgroups import Cgroups, parse_proc_cgroup
from agent.stats.model import NodeStats, PodRef, PodStats, Summary, SwapStats, SystemContainer
from agent.stats.provider import StatsProvider, _node_swap
from agent.stats.resource_metrics import render
from agent.stats.summary import summary_json
from agent.stats.syscontainers import locate, process_start, unix_socket_peer
from tests.agent.test_stats_unit import MIB, v1_cgroup, write


def test_v2_swap_current_and_limit(tmp_path: Path) -> None:
    write(tmp_path, "cgroup.controllers", "cpu memory\n")
    for rel, swap_max in (("limited", f"{8 * MIB}\n"), ("open", "max\n")):
        write(tmp_path, f"{rel}/cpu.stat", "usage_usec 1\n")
        write(tmp_path, f"{rel}/memory.current", f"{MIB}\n")
        write(tmp_path, f"{rel}/memory.stat", "anon 1\n")
        write(tmp_path, f"{rel}/memory.swap.current", f"{3 * MIB}\n")
        write(tmp_path, f"{rel}/memory.swap.max", swap_max)
    write(tmp_path, "noswap/cpu.stat", "usage_usec 1\n")
    cg = Cgroups(tmp_path)
    limited, open_, none = cg.usage("/limited"), cg.usage("/open"), cg.usage("/noswap")
    assert limited is not None and (limited.swap_usage, limited.swap_limit) == (3 * MIB, 8 * MIB)
    assert open_ is not None and (open_.swap_usage, open_.swap_limit) == (3 * MIB, None)
    assert none is not None and none.swap_usage is None
    assert StatsProvider._swap(limited, 10.0) == SwapStats(10.0, 5 * MIB, 3 * MIB)
    assert StatsProvider._swap(open_, 10.0) == SwapStats(10.0, None, 3 * MIB)
    assert StatsProvider._swap(none, 10.0) is None


def test_v1_swap_is_memsw_less_memory_and_only_where_accounted(tmp_path: Path) -> None:
    v1_cgroup(tmp_path, "acct", cpu=1, usage=4 * MIB, inactive=0)
    write(tmp_path, "memory/acct/memory.memsw.usage_in_bytes", f"{6 * MIB}\n")
    write(tmp_path, "memory/acct/memory.memsw.limit_in_bytes", "9223372036854771712\n")
    v1_cgroup(tmp_path, "plain", cpu=1, usage=4 * MIB, inactive=0)
    cg = Cgroups(tmp_path)
    acct, plain = cg.usage("/acct"), cg.usage("/plain")
    assert acct is not None and (acct.swap_usage, acct.swap_limit) == (2 * MIB, None)
    assert plain is not None and plain.swap_usage is None
    # a process whose cpu and memory groups differ (v1) is read from each
    v1_cgroup(tmp_path, "cpuonly", cpu=99, usage=1, inactive=0)
    split = cg.usage("/cpuonly", "/acct")
    assert split is not None and (split.cpu_usage_ns, split.memory_usage) == (99, 4 * MIB)


def test_node_swap_from_meminfo() -> None:
    assert _node_swap({"SwapTotal": 10 * MIB, "SwapFree": 4 * MIB}, 5.0) == SwapStats(5.0, 4 * MIB, 6 * MIB)
    assert _node_swap({"SwapTotal": 0, "SwapFree": 0}, 5.0) == SwapStats(5.0, 0, 0)
    assert _node_swap({}, 5.0) is None


def test_swap_json_and_resource_series() -> None:
    swap = SwapStats(1_700_000_100.0, 5, 7)
    node = NodeStats(
        "n1",
        1_700_000_000.0,
        swap=SwapStats(1_700_000_100.0, 0, 0),
        system_containers=(SystemContainer("kubelet", 1_700_000_000.0, swap=swap),),
    )
    pod = PodStats(PodRef("p", "ns", "u"), 1_700_000_000.0, swap=swap)
    doc = summary_json(Summary(node, (pod,)))
    want = {"time": "2023-11-14T22:15:00Z", "swapAvailableBytes": 5, "swapUsageBytes": 7}
    assert doc["pods"][0]["swap"] == want and doc["node"]["systemContainers"][0]["swap"] == want
    assert doc["node"]["swap"] == {
        "time": "2023-11-14T22:15:00Z",
        "swapAvailableBytes": 0,
        "swapUsageBytes": 0,
    }
    assert list(doc["node"])[-1] == "swap"  # last, where upstream's types added it
    families = {f.name: f for f in text_string_to_metric_families(render(Summary(node, (pod,))).decode())}
    (sample,) = families["pod_swap_usage_bytes"].samples
    assert (sample.labels, sample.value, sample.timestamp) == (
        {"pod": "p", "namespace": "ns"},
        7,
        1_700_000_100,
    )
    assert families["node_swap_usage_bytes"].samples[0].value == 0


def test_proc_cgroup_paths() -> None:
    v1 = "12:memory:/process_api/abc\n4:cpu,cpuacct:/user.slice\n1:name=systemd:/x\n0::/\n"
    assert parse_proc_cgroup(v1) == ("/user.slice", "/process_api/abc")
    assert parse_proc_cgroup("0::/system.slice/kubelet.service\n") == (
        "/system.slice/kubelet.service",
        "/system.slice/kubelet.service",
    )


def test_the_runtime_is_the_peer_of_its_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "cri.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def accept() -> None:
        conn, _ = server.accept()
        conn.close()

    thread = threading.Thread(target=accept)
    thread.start()
    try:
        assert unix_socket_peer(f"unix://{path}") == os.getpid()
    finally:
        thread.join(5)
        server.close()
    assert unix_socket_peer(f"unix://{tmp_path}/absent.sock") is None
    assert unix_socket_peer("tcp://10.0.0.1:1") is None
    boot = 1_000.0
    found = locate("", "/system.slice/containerd.service", "", boot)
    assert [c.name for c in found] == ["kubelet", "runtime"]
    assert found[1].cpu_path == found[1].memory_path == "/system.slice/containerd.service"
    assert found[0].start_time == process_start(os.getpid(), boot) > boot
    assert [c.name for c in locate("/kubelet.slice", "", "unix:///nonexistent", boot)] == ["kubelet"]


def test_kubelet_and_runtime_cgroups_come_from_the_kubelet_configuration(tmp_path: Path) -> None:
    """kubeletCgroups from the file; runtimeCgroups is a flag only upstream (--runtime-cgroups)."""
    import argparse

    from agent.cli import add_arguments, build_config

    path = tmp_path / "kubelet.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "kubeletCgroups: /system.slice/kubelet.service\n"
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = build_config(
        parser.parse_args(["--config", str(path), "--runtime-cgroups", "/system.slice/containerd.service"])
    )
    assert (cfg.kubelet_cgroups, cfg.runtime_cgroups) == (
        "/system.slice/kubelet.service",
        "/system.slice/containerd.service",
    )
