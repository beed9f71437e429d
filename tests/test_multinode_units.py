"""The pieces of a multi-node stack that need no host: bridge names, a joined node's kubelet config
without a pod CIDR (the node IPAM's then), the nodes' labels (`up --zones` dealt round-robin, `--node-labels`
on every node's agent), the sweep finding a node's network from its conflist when its record was written
before the CIDR was known, and `up`'s refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent.nodelabels import NodeLabelError
from pykubelet.rig.nodelabels import checked_labels, labels_of, node_labels_flag, parse_zones
from pykubelet.rig.nodeplan import NodePlan, agent_argv, kubelet_config
from pykubelet.rig.nodes import node_bridge
from pykubelet.rig.stack import StackConfig, StackRecord
from pykubelet.rig.sweep import StackNetwork, find_network, looks_like_a_stack, node_dirs


def plan(tmp_path: Path, pod_cidr: str) -> NodePlan:
    return NodePlan(tmp_path, "n2", pod_cidr, "br0-2", 10250, "pause", "", False)


def test_bridges_are_named_after_the_first_and_fit_linux() -> None:
    assert node_bridge("pykbr0", 2) == "pykbr0-2"
    with pytest.raises(ValueError, match="longer than 15"):
        node_bridge("averylongbridge", 2)


def test_a_joined_node_without_a_pod_cidr_leaves_it_to_the_cluster(tmp_path: Path) -> None:
    assert "podCIDR" not in kubelet_config(plan(tmp_path, ""))
    assert kubelet_config(plan(tmp_path, "10.1.2.0/24"))["podCIDR"] == "10.1.2.0/24"


def test_zones_are_dealt_round_robin_beside_every_nodes_labels(tmp_path: Path) -> None:
    config = StackConfig(tmp_path, zones=("zone-a", "zone-b"), node_labels={"example.com/pool": "blue"})
    zone = "topology.kubernetes.io/zone"
    assert [config.labels_of(i)[zone] for i in (1, 2, 3, 4)] == ["zone-a", "zone-b", "zone-a", "zone-b"]
    assert config.labels_of(3) == {"example.com/pool": "blue", zone: "zone-a"}
    assert labels_of(2, {}, ()) == {}  # no zones, no labels: none
    assert node_labels_flag(config.labels_of(2)) == "example.com/pool=blue,topology.kubernetes.io/zone=zone-b"
    # the flag the node's agent is started with (a joined node's plan, as the rig's further nodes)
    labelled = NodePlan(tmp_path, "n2", "", "br0-2", 10250, "pause", "", False, node_labels="a=b")
    argv = agent_argv(labelled, "unix:///s")
    assert argv[argv.index("--node-labels") + 1] == "a=b"
    assert "--node-labels" not in agent_argv(plan(tmp_path, ""), "unix:///s")


def test_up_checks_the_labels_and_zones_as_the_agents_would() -> None:
    """What `up` refuses before it starts anything (its wiring: the subprocess case below)."""
    for zones, labels, text in (
        ("", "pool", "malformed pair, expect string=string"),
        ("zone a", "", "invalid zone 'zone a': a valid label must be an empty string"),
        (
            "a,b",
            "topology.kubernetes.io/zone=c",
            "--zones and a topology.kubernetes.io/zone in --node-labels",
        ),
        ("", "kubernetes.io/role=x", "labels specified with --node-labels: [kubernetes.io/role]"),
    ):
        with pytest.raises(NodeLabelError, match=re.escape(text)):
            checked_labels(labels, parse_zones(zones))
    assert checked_labels(" example.com/pool=blue ", parse_zones(" zone-a, zone-b,")) == {
        "example.com/pool": "blue"
    }
    assert parse_zones(" zone-a, zone-b,") == ("zone-a", "zone-b")


def test_the_sweep_reads_an_ipam_nodes_cidr_from_its_conflist(tmp_path: Path) -> None:
    node = tmp_path / "nodes" / "n2"
    record = StackRecord(str(node), "n2", "", {}, "", "", "br0-2", "")
    assert find_network(node, record) is None  # no conflist: no pod was attached, no bridge
    conf = node / "cni" / "net.d"
    conf.mkdir(parents=True)
    plugin = {"bridge": "br0-2", "ipam": {"ranges": [[{"subnet": "10.201.1.0/24"}]]}}
    (conf / "10-pykubelet.conflist").write_text(json.dumps({"plugins": [plugin]}))
    assert find_network(node, record) == StackNetwork("br0-2", "10.201.1.0/24")
    assert node_dirs(tmp_path) == [node]
    assert looks_like_a_stack(tmp_path)


def test_up_refuses_a_pod_cidr_with_several_nodes_no_nodes_and_labels_a_kubelet_may_not_set() -> None:
    for args, text in (
        (["--nodes", "2", "--pod-cidr", "10.1.0.0/24"], "with --nodes each node's comes from --cluster-cidr"),
        (["--nodes", "0"], "--nodes is at least 1"),
        # what the agents would refuse to start with, refused before anything starts
        (
            ["--node-labels", "node-role.kubernetes.io/worker="],
            "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
            "[node-role.kubernetes.io/worker]",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "pykubelet", "up", *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode != 0
        assert text in done.stderr, done.stderr


def test_the_controller_manager_wants_a_cluster_cidr_to_allocate_from(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pykubelet", "controller-manager", "--allocate-node-cidrs",
         "--kubeconfig", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "Controller: Must specify --cluster-cidr if --allocate-node-cidrs is set" in done.stderr
