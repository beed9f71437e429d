"""Node status setters: capacity/allocatable arithmetic, pressure conditions, Ready messages and
condition transition times, and the config file and flags they come from."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import add_arguments, build_config
from agent.config import AgentConfig, ConfigFileError, load_config_file, parse_duration
from agent.node.facts import HostFacts, Usage
from agent.node.status import RuntimeHealth, allocatable, condition_specs, merge_conditions, node_status

GI = 2**30
FACTS = HostFacts(
    "mid", "uuid", "boot", "6.1.0", "Debian GNU/Linux 12 (bookworm)", "amd64", 2, 24 * GI, "host"
)
USAGE = Usage(
    memory_available=20 * GI,
    fs_capacity=100 * GI,
    fs_available=50 * GI,
    inodes_total=1000,
    inodes_free=900,
    pids_max=32768,
    pids_used=300,
)
HEALTHY = RuntimeHealth(True, True, "", "", True, "", "", "containerd://1.6.20")


def test_allocatable_subtracts_reservations_and_eviction():
    cfg = AgentConfig(
        node_name="n", system_reserved={"cpu": "500m", "memory": "1Gi"}, kube_reserved={"memory": "512Mi"}
    )
    alloc = allocatable(cfg, FACTS, USAGE)
    assert alloc["cpu"] == "1500m"
    assert alloc["memory"] == f"{(24 * GI - GI - GI // 2 - 100 * 2**20) // 1024}Ki"
    assert alloc["ephemeral-storage"] == str(100 * GI - 10 * GI)
    assert alloc["pods"] == "110"


@pytest.mark.parametrize(
    ("usage", "kind", "reason"),
    [
        (
            Usage(50 * 2**20, 100 * GI, 50 * GI, 1000, 900, 32768, 300),
            "MemoryPressure",
            "KubeletHasInsufficientMemory",
        ),
        (Usage(20 * GI, 100 * GI, 5 * GI, 1000, 900, 32768, 300), "DiskPressure", "KubeletHasDiskPressure"),
        (Usage(20 * GI, 100 * GI, 50 * GI, 1000, 10, 32768, 300), "DiskPressure", "KubeletHasDiskPressure"),
    ],
)
def test_pressure_against_default_thresholds(usage, kind, reason):
    specs = {s.type: s for s in condition_specs(AgentConfig(node_name="n"), FACTS, usage, HEALTHY)}
    assert (specs[kind].status, specs[kind].reason) == ("True", reason)
    assert specs["PIDPressure"].reason == "KubeletHasSufficientPID"


def test_ready_messages():
    cfg = AgentConfig(node_name="n")
    ready = {s.type: s for s in condition_specs(cfg, FACTS, USAGE, HEALTHY)}["Ready"]
    assert (ready.status, ready.reason, ready.message) == (
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
    down = {s.type: s for s in condition_specs(cfg, FACTS, USAGE, RuntimeHealth(False))}["Ready"]
    assert (down.status, down.reason, down.message) == (
        "False",
        "KubeletNotReady",
        "container runtime is down",
    )
    net = RuntimeHealth(True, True, "", "", False, "NetworkPluginNotReady", "cni plugin not initialized", "x")
    msg = {s.type: s for s in condition_specs(cfg, FACTS, USAGE, net)}["Ready"].message
    assert (
        msg
        == "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized"
    )


def test_transition_time_moves_only_on_change():
    cfg = AgentConfig(node_name="n")
    first = merge_conditions([], condition_specs(cfg, FACTS, USAGE, HEALTHY), "T1")
    second = merge_conditions(first, condition_specs(cfg, FACTS, USAGE, HEALTHY), "T2")
    assert all(c["lastTransitionTime"] == "T1" and c["lastHeartbeatTime"] == "T2" for c in second)
    third = merge_conditions(second, condition_specs(cfg, FACTS, USAGE, RuntimeHealth(False)), "T3")
    ready = next(c for c in third if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "T3"


def test_node_status_shape():
    st = node_status(AgentConfig(node_name="n", port=10250), FACTS, USAGE, HEALTHY, "192.0.2.7", [], now="T")
    assert st["addresses"] == [
        {"type": "InternalIP", "address": "192.0.2.7"},
        {"type": "Hostname", "address": "n"},
    ]
    assert st["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert st["nodeInfo"]["containerRuntimeVersion"] == "containerd://1.6.20"
    assert st["nodeInfo"]["kubeletVersion"].startswith("v1.")
    assert st["capacity"]["memory"] == f"{24 * GI // 1024}Ki"


def test_config_file_and_flags(tmp_path: Path):
    path = tmp_path / "kubelet.yaml"
    path.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\npodCIDR: 10.1.0.0/24\n"
        "podLogsDir: /tmp/logs\nclusterDomain: cluster.local\nclusterDNS: [10.96.0.10]\nport: 10260\n"
        "nodeStatusUpdateFrequency: 5s\nnodeStatusReportFrequency: 1m0s\nmaxPods: 20\n"
        "authentication:\n  x509:\n    clientCAFile: /pki/ca.crt\n  anonymous:\n    enabled: true\naddress: 127.0.0.1\n"
    )
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--config", str(path), "--node-name", "Node-A", "--root-dir", "/tmp/r", "--node-labels", "a=b,c=d"]
    )
    cfg = build_config(args)
    assert (cfg.node_name, cfg.root_dir, cfg.pod_cidr, cfg.pod_logs_dir, cfg.port) == (
        "node-a",
        "/tmp/r",
        "10.1.0.0/24",
        "/tmp/logs",
        10260,
    )
    assert (cfg.node_status_update_frequency, cfg.node_status_report_frequency, cfg.max_pods) == (
        5.0,
        60.0,
        20,
    )
    assert cfg.cluster_dns == ["10.96.0.10"] and cfg.node_labels == {"a": "b", "c": "d"}
    assert cfg.eviction_hard["memory.available"] == "100Mi"
    assert (cfg.client_ca_file, cfg.anonymous_auth, cfg.address) == ("/pki/ca.crt", True, "127.0.0.1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n")
    with pytest.raises(ConfigFileError):
        load_config_file(bad)
    assert parse_duration("1h2m3.5s") == 3723.5


def test_pleg_problem_joins_the_ready_message():
    import dataclasses

    cfg = AgentConfig(node_name="n")
    pleg = "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s"
    ready = {s.type: s for s in condition_specs(cfg, FACTS, USAGE, dataclasses.replace(HEALTHY, pleg=pleg))}[
        "Ready"
    ]
    assert (ready.status, ready.message) == ("False", pleg)
    both = {s.type: s for s in condition_specs(cfg, FACTS, USAGE, RuntimeHealth(False, pleg=pleg))}["Ready"]
    assert both.message == f"[container runtime is down, {pleg}]"
