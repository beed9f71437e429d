"""The Node as upstream's kubelet keeps it, beyond the plain setters (tests/agent/test_node_status.py):
its events, the runtime's health threshold, the fast first Ready, the InternalIP choice, huge pages,
image names and allocatable enforced on the pods' cgroup. No API server: a small stand-in client."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.node import facts as host
from agent.node.allocatable import enforce_node_allocatable
from agent.node.controller import NodeController
from agent.node.images import image_list
from agent.node.runtime import RuntimeTracker
from agent.node.status import (
    RuntimeHealth,
    allocatable,
    capacity,
    condition_events,
    condition_specs,
    rebooted,
)
from agent.pods.events import kubelet_recorder
from kubeclient.errors import ApiError

GI = 2**30
FACTS = host.HostFacts(
    "mid", "uuid", "boot-2", "6.1.0", "Debian", "amd64", 2, 8 * GI, "host", {2 * 2**20: 512, GI: 0}
)
USAGE = host.Usage(6 * GI, 100 * GI, 50 * GI, 1000, 900, 32768, 300)
HEALTHY = RuntimeHealth(True, True, "", "", True, "", "", "containerd://1.6.20")


def test_condition_events_against_the_node_the_api_holds():
    cfg = AgentConfig(node_name="n")
    specs = condition_specs(cfg, FACTS, USAGE, HEALTHY)
    # A new node: each pressure condition is announced, Ready (new) is not.
    assert condition_events([], specs) == [
        "NodeHasSufficientMemory",
        "NodeHasNoDiskPressure",
        "NodeHasSufficientPID",
    ]
    held = [{"type": s.type, "status": s.status} for s in specs]
    assert condition_events(held, specs) == []  # an agent restart changes nothing
    unknown = [{**c, "status": "Unknown"} for c in held]  # the node lifecycle controller's marks
    assert condition_events(unknown, specs) == [
        "NodeHasSufficientMemory",
        "NodeHasNoDiskPressure",
        "NodeHasSufficientPID",
        "NodeReady",
    ]
    down = condition_specs(cfg, FACTS, USAGE, RuntimeHealth(False))
    assert condition_events(held, down) == ["NodeNotReady"]


def test_rebooted_when_the_boot_id_changed():
    assert rebooted({"nodeInfo": {"bootID": "boot-1"}}, FACTS)
    assert not rebooted({"nodeInfo": {"bootID": "boot-2"}}, FACTS)
    assert not rebooted({}, FACTS)


def test_problems_in_upstreams_order():
    pleg = "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s"
    net = RuntimeHealth(True, False, "R", "r", False, "N", "n", pleg=pleg)
    assert net.problems() == [
        pleg,
        "container runtime not ready: RuntimeReady=false reason:R message:r",
        "container runtime network not ready: NetworkReady=false reason:N message:n",
    ]


def test_runtime_turns_down_only_after_the_threshold():
    now = [0.0]
    answers = [HEALTHY]

    async def probe():
        return answers[-1]

    async def run():
        tracker = RuntimeTracker(probe, threshold=30, clock=lambda: now[0])
        first = await tracker.check()
        assert first.problems() == []
        answers.append(RuntimeHealth(reachable=False))  # the Status call fails from now on
        now[0] = 20
        assert (await tracker.check()).problems() == []  # one failed call is no outage
        now[0] = 30
        down = await tracker.check()
        assert down.problems() == ["container runtime is down"]
        answers.append(HEALTHY)
        assert (await tracker.check()).problems() == []

    asyncio.run(run())


def test_before_the_first_answer():
    async def probe():
        return RuntimeHealth(True, False, "NotReady", "starting", True)

    health = asyncio.run(RuntimeTracker(probe).check())
    assert health.problems() == [
        "container runtime status check may not have completed yet",
        "container runtime not ready: RuntimeReady=false reason:NotReady message:starting",
    ]


def test_node_ip_as_upstream_chooses_it():
    local = lambda: {"lo": ["127.0.0.1"], "eth0": ["192.0.2.7"], "eth1": ["198.51.100.3"]}  # noqa: E731
    route = lambda: "192.0.2.7"  # noqa: E731
    assert host.choose_node_ip("203.0.113.9", "h", "n", lambda _: [], local, route) == "203.0.113.9"
    assert host.choose_node_ip("", "198.51.100.3", "n", lambda _: [], local, route) == "198.51.100.3"
    # The node name's address, when it is one of this host's...
    assert host.choose_node_ip("", "h", "n", lambda _: ["198.51.100.3"], local, route) == "198.51.100.3"
    # ...never loopback or a foreign one: then the default route's interface.
    assert (
        host.choose_node_ip("", "h", "n", lambda _: ["127.0.0.1", "203.0.113.1"], local, route) == "192.0.2.7"
    )
    with pytest.raises(host.NodeIPError, match="can't get ip address of node n"):
        host.choose_node_ip("", "h", "n", lambda _: ["127.0.0.1"], lambda: {"lo": ["127.0.0.1"]}, lambda: "")


def test_hugepages_from_the_host(tmp_path: Path):
    for size, pages in (("2048kB", "4"), ("1048576kB", "0")):
        (tmp_path / f"hugepages-{size}").mkdir()
        (tmp_path / f"hugepages-{size}" / "nr_hugepages").write_text(pages + "\n")
    assert host.hugepages(str(tmp_path)) == {2 * 2**20: 4, GI: 0}
    cfg = AgentConfig(node_name="n")
    cap = capacity(cfg, FACTS, USAGE)
    assert (cap["hugepages-2Mi"], cap["hugepages-1Gi"]) == ("1Gi", "0")
    alloc = allocatable(cfg, FACTS, USAGE)
    # What the huge pages hold is not allocatable as memory (and 100Mi is the hard eviction threshold).
    assert alloc["memory"] == f"{(8 * GI - GI - 100 * 2**20) // 1024}Ki"
    assert alloc["hugepages-2Mi"] == "1Gi"


def test_image_names_capped_at_five():
    class Image:
        def __init__(self, size, tags, digests=()):
            self.size, self.repo_tags, self.repo_digests = size, list(tags), list(digests)

    images = image_list(
        [Image(10, [f"r/i:{n}" for n in range(7)], ["r/i@sha256:1"]), Image(20, ["big:1"]), Image(5, [])]
    )
    assert [i["sizeBytes"] for i in images] == [20, 10]
    assert images[1]["names"] == ["r/i@sha256:1", "r/i:0", "r/i:1", "r/i:2", "r/i:3"]


def test_allocatable_enforced_on_the_pods_cgroup(tmp_path: Path):
    cfg = AgentConfig(node_name="n", cgroup_root="/tests", system_reserved={"cpu": "500m", "memory": "1Gi"})
    assert enforce_node_allocatable(cfg, FACTS, tmp_path)
    assert (tmp_path / "cpu/tests/kubepods/cpu.shares").read_text() == str(1500 * 1024 // 1000)
    assert (tmp_path / "memory/tests/kubepods/memory.limit_in_bytes").read_text() == str(7 * GI)
    assert not enforce_node_allocatable(AgentConfig(node_name="n", cgroup_driver="systemd"), FACTS, tmp_path)


class StandInClient:
    """The few calls the node controller makes, on one Node object in memory."""

    def __init__(self, node: dict[str, Any] | None = None) -> None:
        self.node = node
        self.posts: list[tuple[float, dict[str, Any]]] = []  # the statuses written: created or patched
        self.patches = 0  # of nodes/status

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        if self.node is None:
            raise ApiError(404, "NotFound", "not found", {})
        return copy.deepcopy(self.node)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.node = {**body, "metadata": {**body["metadata"], "uid": "node-uid"}}
        if "status" in body:
            self.posts.append((time.monotonic(), body["status"]))
        return copy.deepcopy(self.node)

    async def patch(self, path: str, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
        assert self.node is not None
        if path.endswith("/status"):
            self.node["status"] = body["status"]
            self.posts.append((time.monotonic(), body["status"]))
            self.patches += 1
        else:
            self.node["metadata"]["labels"].update(body["metadata"]["labels"])
        return copy.deepcopy(self.node)


def _ready(status: dict[str, Any]) -> str:
    return next(c["status"] for c in status["conditions"] if c["type"] == "Ready")


async def test_first_ready_is_posted_at_once_not_at_the_next_tick(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(host, "host_facts", lambda: FACTS)
    monkeypatch.setattr(host, "usage", lambda root: USAGE)
    network = {"ready": False}

    async def health():
        return RuntimeHealth(
            True, True, "", "", network["ready"], "NetworkPluginNotReady", "cni", "containerd://1.6.20"
        )

    cfg = AgentConfig(
        node_name="n",
        node_ip="192.0.2.7",
        root_dir=str(tmp_path),
        node_status_update_frequency=10,
        cgroups_per_qos=False,
    )
    client = StandInClient()
    recorder = kubelet_recorder(None, "n")
    node = NodeController(client, cfg, health, None, recorder)  # type: ignore[arg-type]
    task = asyncio.create_task(node.run())
    try:
        await asyncio.wait_for(node.registered.wait(), 5)
        assert _ready(client.posts[0][1]) == "False"
        network["ready"] = True  # the CNI config is written a moment after registration
        made_ready = time.monotonic()
        while _ready(client.posts[-1][1]) != "True":
            await asyncio.sleep(0.05)
        assert client.posts[-1][0] - made_ready < 1.0  # not the 10 s of nodeStatusUpdateFrequency
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    reasons = [(r, m) for _u, _t, r, m in recorder.recorded]
    assert reasons[0] == ("Starting", "Starting kubelet.")
    assert ("NodeHasSufficientMemory", "Node n status is now: NodeHasSufficientMemory") in reasons
    assert ("NodeHasNoDiskPressure", "Node n status is now: NodeHasNoDiskPressure") in reasons
    assert ("NodeHasSufficientPID", "Node n status is now: NodeHasSufficientPID") in reasons
    assert ("NodeReady", "Node n status is now: NodeReady") in reasons
    assert all(u == "n" for u, *_ in recorder.recorded)  # about the Node (its name as the UID, as upstream)


async def test_a_new_node_is_created_with_its_status_and_announced_once(tmp_path: Path, monkeypatch):
    """Upstream's registerWithAPIServer: the status goes in the create, no status write follows it, and
    the conditions' events are recorded once."""
    monkeypatch.setattr(host, "host_facts", lambda: FACTS)
    monkeypatch.setattr(host, "usage", lambda root: USAGE)

    async def health():
        return HEALTHY

    async def no_volumes() -> list[str]:
        return []

    cfg = AgentConfig(node_name="n", node_ip="192.0.2.7", root_dir=str(tmp_path))
    client = StandInClient()
    recorder = kubelet_recorder(None, "n")
    controller = NodeController(client, cfg, health, None, recorder, no_volumes)  # type: ignore[arg-type]
    await controller.register()
    assert client.node is not None and client.patches == 0
    status = client.node["status"]
    assert status["nodeInfo"]["bootID"] == "boot-2"
    assert {"type": "InternalIP", "address": "192.0.2.7"} in status["addresses"]
    assert _ready(status) == "True"
    assert "volumesInUse" not in status  # no nulls in a created object
    reasons = sorted(r for _u, _t, r, _m in recorder.recorded)
    assert reasons == ["NodeHasNoDiskPressure", "NodeHasSufficientMemory", "NodeHasSufficientPID"]


async def test_adopted_node_from_another_boot_reports_rebooted(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(host, "host_facts", lambda: FACTS)
    monkeypatch.setattr(host, "usage", lambda root: USAGE)

    async def health():
        return HEALTHY

    cfg = AgentConfig(node_name="n", node_ip="192.0.2.7", root_dir=str(tmp_path))
    existing = {
        "metadata": {"name": "n", "uid": "u", "labels": {}},
        "status": {"nodeInfo": {"bootID": "boot-1"}},
    }
    recorder = kubelet_recorder(None, "n")
    node = NodeController(StandInClient(existing), cfg, health, None, recorder)  # type: ignore[arg-type]
    await node.register()
    assert ("Warning", "Rebooted", "Node n has been rebooted, boot id: boot-2") in [
        (t, r, m) for _u, t, r, m in recorder.recorded
    ]


def test_runtime_is_asked_once_a_period_and_judged_from_the_last_answer():
    now = [0.0]
    calls = []

    async def probe():
        calls.append(now[0])
        return HEALTHY

    async def run():
        tracker = RuntimeTracker(probe, clock=lambda: now[0], period=5)
        await tracker.current()
        now[0] = 3
        assert (await tracker.current()).problems() == []
        assert calls == [0.0]  # answered from the last check
        now[0] = 5
        await tracker.current()
        assert calls == [0.0, 5]

    asyncio.run(run())


async def test_an_adopted_node_gets_its_default_labels_back_and_keeps_the_rest(tmp_path: Path, monkeypatch):
    """Upstream's updateDefaultLabels: a Node that already exists has its well-known labels (zone, hostname,
    os, arch, ...) set as the agent's flags say; its other labels, an administrator's included, stand, and
    the agent's other --node-labels are for a Node it creates."""
    monkeypatch.setattr(host, "host_facts", lambda: FACTS)
    monkeypatch.setattr(host, "usage", lambda root: USAGE)

    async def health():
        return HEALTHY

    cfg = AgentConfig(
        node_name="n",
        node_ip="192.0.2.7",
        root_dir=str(tmp_path),
        node_labels={"topology.kubernetes.io/zone": "zone-b", "example.com/pool": "blue"},
    )
    held = {"topology.kubernetes.io/zone": "zone-a", "example.com/pool": "green", "team": "a"}
    existing = {"metadata": {"name": "n", "uid": "u", "labels": dict(held)}, "status": {}}
    client = StandInClient(existing)
    await NodeController(client, cfg, health, None, None).register()  # type: ignore[arg-type]
    assert client.node is not None
    assert client.node["metadata"]["labels"] == {
        **held,
        "topology.kubernetes.io/zone": "zone-b",
        "kubernetes.io/hostname": "n",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
    }
    # A Node the agent creates carries every --node-labels.
    fresh = StandInClient()
    await NodeController(fresh, cfg, health, None, None).register()  # type: ignore[arg-type]
    assert fresh.node is not None
    assert fresh.node["metadata"]["labels"]["example.com/pool"] == "blue"
    assert fresh.node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-b"
