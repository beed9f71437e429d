"""The agent as its node's network add-on: with --cni-conf-dir it installs pykubelet-cni, serves its
calls, writes the conflist (so the runtime reports NetworkReady) and frees what sandboxes that no longer
exist left allocated."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.app import Agent
from agent.cni.node import NodeNetwork
from agent.config import AgentConfig
from agent.cri import CRIClient, runtime_condition
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages
from pykubelet.rig.registry import Registry

pytestmark = pytest.mark.integration

POD_CIDR = "10.89.0.0/24"
BRIDGE = "pykagnet0"
STALE_IP = "10.89.0.77"


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[dict[str, Path]]:
    d = {name: tmp_path / name for name in ("conf", "bin", "ipam", "root", "logs")}
    yield d
    NodeNetwork(
        conf_dir=d["conf"], bin_dir=d["bin"], data_dir=d["ipam"], pod_cidr=POD_CIDR, bridge=BRIDGE
    ).remove()


async def _network_ready(endpoint: str) -> bool:
    async with await CRIClient.connect(endpoint) as cri:
        cond = runtime_condition(await cri.status(), "NetworkReady")
        return bool(cond and cond.status)


async def test_agent_runs_the_pod_network(
    apiserver: ApiServer, registry: Registry, test_images: RigImages, dirs: dict[str, Path]
) -> None:
    # An allocation left by a sandbox that no longer exists (a reboot, a lost DEL).
    stale = dirs["ipam"] / "pykubelet" / STALE_IP
    stale.parent.mkdir(parents=True)
    stale.write_text("gone-sandbox\r\neth0")
    ctd = Containerd(
        dirs["root"] / "ctd",
        cni_bin_dir=dirs["bin"],
        cni_conf_dir=dirs["conf"],
        sandbox_image=test_images.pause,
        registry=registry.address,
    ).start()
    agent = None
    try:
        assert not await _network_ready(ctd.endpoint)  # no conflist yet
        node_name = f"net-{uuid.uuid4().hex[:6]}"
        kubeconfig = apiserver.client_kubeconfig(
            f"system:node:{node_name}", ("system:nodes",), dirs["root"] / "kubelet.kubeconfig"
        )
        cfg = AgentConfig(
            port=0,
            node_name=node_name,
            kubeconfig=str(kubeconfig),
            container_runtime_endpoint=ctd.endpoint,
            root_dir=str(dirs["root"] / "agent"),
            pod_logs_dir=str(dirs["logs"]),
            pod_cidr=POD_CIDR,
            cni_conf_dir=str(dirs["conf"]),
            cni_bin_dir=str(dirs["bin"]),
            cni_data_dir=str(dirs["ipam"]),
            cni_bridge=BRIDGE,
        )
        agent = Agent(cfg)
        await asyncio.wait_for(agent.start(), 60)

        conflist = json.loads(next(dirs["conf"].glob("*.conflist")).read_text())
        assert conflist["plugins"][0]["type"] == "pykubelet-cni"
        assert conflist["plugins"][0]["ipam"]["ranges"][0][0]["subnet"] == POD_CIDR
        assert (dirs["bin"] / "pykubelet-cni").exists() and (dirs["bin"] / "loopback").exists()
        assert (Path(cfg.root_dir) / "cni.sock").exists()  # served from the agent's process
        assert not stale.exists(), "the allocation of a sandbox the runtime does not have was not freed"
        deadline = time.monotonic() + 30
        while not await _network_ready(ctd.endpoint):  # containerd reloads the conf dir on its own clock
            assert time.monotonic() < deadline, "containerd never reported NetworkReady"
            await asyncio.sleep(0.5)
    finally:
        if agent is not None:
            await agent.stop()
        left = ctd.stop()
        assert left.empty(), left
