"""Our plugin under a real containerd: the conflist writer makes the network ready, pod sandboxes get
addresses from our range through the shim and the network service hosted in this event loop (as the
agent will host it), pods reach each other and the host, a hostPort works, a pod started while the
service is down gets networking from the in-process fallback, a restarted service serves the old
pods' DELs, and removing the pods leaves nothing of ours behind."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cnitest import PodNetwork, new_network, sh

from agent.cni.node import NodeNetwork
from agent.cni.service import NetworkService
from agent.cri import CRIClient, pb, runtime_condition
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.cripod import pod_sandbox_config
from pykubelet.rig.images import RigImages
from pykubelet.rig.registry import Registry

pytestmark = pytest.mark.integration

HOST_PORT = 18961


def sandbox_config(
    name: str, log_dir: Path, ports: list[pb.PortMapping] | None = None
) -> pb.PodSandboxConfig:
    return pod_sandbox_config(name, "cni-test", log_dir, ports)


def container_config(
    name: str, image: str, command: list[str], sandbox: pb.PodSandboxConfig
) -> pb.ContainerConfig:
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0),
        image=pb.ImageSpec(image=image),
        command=command,
        log_path=f"{name}/0.log",
        labels={**sandbox.labels, "io.kubernetes.container.name": name},
    )


async def http_get(url: str, timeout: float = 15.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=2).read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def host_address() -> str:
    routes = json.loads(sh("ip", "-j", "-4", "route", "show", "default").stdout or "[]")
    if not routes:
        pytest.skip("host has no default route to take its address from")
    addrs = json.loads(sh("ip", "-j", "-4", "addr", "show", "dev", routes[0]["dev"]).stdout)
    return addrs[0]["addr_info"][0]["local"]


@pytest.fixture
async def our_network(tmp_path: Path) -> AsyncIterator[tuple[PodNetwork, NodeNetwork]]:
    """The node network as the agent will own it; the test starts it (executables, service in this
    loop, conflist) once containerd runs."""
    net = new_network(tmp_path)
    node = NodeNetwork(
        conf_dir=tmp_path / "cni-conf",
        bin_dir=tmp_path / "cni-bin",
        data_dir=net.data_dir,
        pod_cidr=str(net.subnet),
        name=net.name,
        bridge=net.bridge,
        socket_path=str(tmp_path / "cni.sock"),
        ip_masq=False,
    )
    try:
        yield net, node
    finally:
        await node.stop()
        node.remove()
        assert not node.conflist_path.exists() and net.bridge_ports() == []
        assert sh("ip", "link", "show", net.bridge, check=False).returncode != 0, "bridge left"


async def test_pods_on_our_network_under_containerd(
    our_network: tuple[PodNetwork, NodeNetwork],
    registry: Registry,
    test_images: RigImages,
    rig_dir: Path,
    tmp_path: Path,
) -> None:
    net, node = our_network
    ctd = Containerd(
        rig_dir / f"containerd-cni-{uuid.uuid4().hex[:6]}",
        cni_bin_dir=node.bin_dir,
        cni_conf_dir=node.conf_dir,
        sandbox_image=test_images.pause,
        registry=registry.address,
    )
    # containerd calls the plugin, which calls back into this loop: never block the loop on it
    await asyncio.to_thread(ctd.start)
    try:
        async with await CRIClient.connect(ctd.endpoint) as cri:
            # no conflist yet: containerd reports the network not ready until the agent writes one
            assert not await network_ready(cri)
            await node.start()
            assert node.service is not None
            deadline = time.monotonic() + 20
            while not await network_ready(cri):  # containerd reloads on the rename
                assert time.monotonic() < deadline, "NetworkReady never became true"
                await asyncio.sleep(0.1)
            await check_pods(cri, net, node.service, test_images, tmp_path)
    finally:
        left = await asyncio.to_thread(ctd.stop)
    assert left.empty(), f"containerd left {left}"
    assert net.bridge_ports() == [] and net.ip_files() == [] and net.nat_rules() == []


async def network_ready(cri: CRIClient) -> bool:
    cond = runtime_condition(await cri.status(), "NetworkReady")
    return bool(cond and cond.status)


async def check_pods(
    cri: CRIClient, net: PodNetwork, service: NetworkService, images: RigImages, tmp_path: Path
) -> None:
    await cri.pull_image(images.busybox)
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    pods: dict[str, Any] = {}
    ports = [pb.PortMapping(protocol=pb.TCP, container_port=8080, host_port=HOST_PORT)]
    for name in ("web", "client"):
        sandbox = sandbox_config(name, log_dir, ports if name == "web" else None)
        sandbox_id = await cri.run_pod_sandbox(sandbox)
        status = await cri.pod_sandbox_status(sandbox_id)
        ip = status.status.network.ip
        assert ipaddress.ip_address(ip) in net.subnet, f"{name} got {ip}, not from {net.subnet}"
        script = "exec httpd -f -p 8080 -h /var/www" if name == "web" else "exec sleep 3600"
        cid = await cri.create_container(
            sandbox_id, container_config(name, images.busybox, ["sh", "-c", script], sandbox), sandbox
        )
        await cri.start_container(cid)
        pods[name] = {"sandbox": sandbox_id, "ip": ip, "container": cid}
    assert service.requests >= 2  # the shim handed containerd's ADDs to the service
    assert sorted(net.ip_files()) == sorted([pods["web"]["ip"], pods["client"]["ip"]])

    web = pods["web"]["ip"]
    assert await http_get(f"http://{web}:8080/index.html") == b"hello from pykubelet busybox\n"  # host -> pod
    ping = await cri.exec_sync(
        pods["client"]["container"], ["ping", "-c", "1", "-W", "2", web], timeout_seconds=10
    )
    assert ping.exit_code == 0, ping.stdout + ping.stderr  # pod -> pod
    ping = await cri.exec_sync(
        pods["client"]["container"], ["ping", "-c", "1", "-W", "2", str(net.gateway)], timeout_seconds=10
    )
    assert ping.exit_code == 0, ping.stdout + ping.stderr  # pod -> host
    assert (
        await http_get(f"http://{host_address()}:{HOST_PORT}/index.html") == b"hello from pykubelet busybox\n"
    )
    assert net.nat_rules() == [f"{pods['web']['sandbox']}/eth0"]

    # the agent goes away: containerd's calls fall back to the in-process plugin, and the running
    # pods keep their addresses; a new service then takes over the same allocations
    await service.stop()
    late = sandbox_config("late", log_dir)
    late_id = await cri.run_pod_sandbox(late)
    late_ip = (await cri.pod_sandbox_status(late_id)).status.network.ip
    assert ipaddress.ip_address(late_ip) in net.subnet and late_ip not in (web, pods["client"]["ip"])
    restarted = NetworkService(service.socket_path)
    await restarted.start()
    try:
        assert await http_get(f"http://{web}:8080/index.html") == b"hello from pykubelet busybox\n"
        pods["late"] = {"sandbox": late_id, "ip": late_ip}
        for pod in pods.values():
            await cri.stop_pod_sandbox(pod["sandbox"])
            await cri.remove_pod_sandbox(pod["sandbox"])
        assert restarted.requests >= 3  # the DELs went to the new service
    finally:
        await restarted.stop()
    assert net.ip_files() == [] and net.nat_rules() == [] and net.bridge_ports() == []
