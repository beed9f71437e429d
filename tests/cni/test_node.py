"""NodeNetwork, the object the agent owns: its conflist drives the plugin, and GC after a "reboot"
frees what the runtime forgot to DEL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cnitest import Namespaces, Plugin, PodNetwork

from agent.cni.node import NodeNetwork

pytestmark = pytest.mark.integration


async def test_gc_frees_forgotten_sandboxes(
    plugin: Plugin, service: object, network: PodNetwork, namespaces: Namespaces, tmp_path: Path
) -> None:
    node = NodeNetwork(
        conf_dir=tmp_path / "conf",
        bin_dir=tmp_path / "bin",
        data_dir=network.data_dir,
        pod_cidr=str(network.subnet),
        name=network.name,
        bridge=network.bridge,
    )
    written = json.loads(node.write().read_text())
    assert written == node.conflist()
    conf = {
        **node.plugin_conf(),
        "runtimeConfig": {"portMappings": [{"hostPort": 18971, "containerPort": 80}]},
    }
    alive, gone = namespaces.new(), namespaces.new()
    plugin.add(conf, "alive", alive)
    plugin.add(
        {**conf, "runtimeConfig": {"portMappings": [{"hostPort": 18972, "containerPort": 80}]}}, "gone", gone
    )
    # the runtime lost "gone" without a DEL (its namespace even lingers): GC with the live set
    assert len(network.bridge_ports()) == 2
    await node.gc({"alive"})
    assert len(network.ip_files()) == 1
    assert network.nat_rules() == ["alive/eth0"]
    assert len(network.bridge_ports()) == 1  # GC removed the forgotten pod's host veth too
    plugin.delete(conf, "alive", alive)
    node.remove()
    assert not node.conflist_path.exists()
