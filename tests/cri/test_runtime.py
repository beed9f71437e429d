"""The whole CRI sequence against the real containerd, its registry and our own pod network.

Each step is checked through the runtime's own answers and, where the host can see it, from the host:
the pod's IP answers HTTP, the log file holds the container's output, and once everything is removed
no sandbox, container, netns, veth or mount is left.
"""

from __future__ import annotations

import asyncio
import ipaddress
import urllib.request
from pathlib import Path

import pytest

from agent.cni.node import NodeNetwork
from agent.cri import CRIClient, DeadlineExceededError, NotFoundError, pb
from agent.cri.logs import read_log_file
from e2e.waiting import wait_for_async
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.cripod import pod_sandbox_config
from pykubelet.rig.images import RigImages
from pykubelet.rig.leaks import Scope

pytestmark = pytest.mark.integration


def sandbox_config(name: str, log_dir: Path) -> pb.PodSandboxConfig:
    config = pod_sandbox_config(name, "default", log_dir)
    config.dns_config.CopyFrom(pb.DNSConfig(servers=["127.0.0.1"], searches=["default.svc.cluster.local"]))
    return config


def container_config(
    name: str, image: str, command: list[str], sandbox: pb.PodSandboxConfig
) -> pb.ContainerConfig:
    labels = dict(sandbox.labels)
    labels["io.kubernetes.container.name"] = name
    return pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=name, attempt=0),
        image=pb.ImageSpec(image=image),
        command=command,
        log_path=f"{name}/0.log",
        labels=labels,
        envs=[pb.KeyValue(key="GREETING", value="hello")],
    )


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


async def test_pod_lifecycle_end_to_end(
    cri: CRIClient,
    containerd: Containerd,
    test_images: RigImages,
    pod_network: NodeNetwork,
    pod_log_dir: Path,
) -> None:
    # What this test adds to the shared containerd's own (shims, mounts, netns) and to the shared
    # network's bridge (veths); the bridge itself and its NAT entries are the session's.
    scope = Scope.of(containerd.state_dir, pod_log_dir, borrowed_bridges=[pod_network.bridge])
    before = scope.owned()

    image_ref = await cri.pull_image(test_images.busybox)
    assert image_ref.startswith("sha256:")
    image = await cri.image_status(test_images.busybox)
    assert image is not None and image.id == image_ref
    assert test_images.busybox in image.repo_tags

    sandbox = sandbox_config("web", pod_log_dir)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    status = await cri.pod_sandbox_status(sandbox_id, verbose=True)
    assert status.status.state == pb.SANDBOX_READY
    assert status.status.metadata.uid == sandbox.metadata.uid
    pod_ip = status.status.network.ip
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(pod_network.pod_cidr)
    listed = await cri.list_pod_sandbox(labels={"io.kubernetes.pod.uid": sandbox.metadata.uid})
    assert [s.id for s in listed] == [sandbox_id]

    script = 'echo "started $GREETING"; echo to-stderr >&2; exec httpd -f -p 8080 -h /var/www'
    config = container_config("web", test_images.busybox, ["sh", "-c", script], sandbox)
    container_id = await cri.create_container(sandbox_id, config, sandbox)
    created = await cri.container_status(container_id)
    assert created.status.state == pb.CONTAINER_CREATED
    await cri.start_container(container_id)
    running = await cri.container_status(container_id)
    assert running.status.state == pb.CONTAINER_RUNNING
    assert running.status.started_at > 0
    # containerd reports the image by its repo digest, which the kubelet shows as imageID.
    assert running.status.image_ref in image.repo_digests

    by_label = await cri.list_containers(
        labels={"io.kubernetes.container.name": "web"}, sandbox_id=sandbox_id
    )
    assert [c.id for c in by_label] == [container_id]
    assert await cri.list_containers(sandbox_id=sandbox_id, state=pb.CONTAINER_EXITED) == []

    # Reached from the host at the pod IP.
    body = await wait_for_async(
        lambda: _try_get(f"http://{pod_ip}:8080/index.html"),
        timeout=15.0,
        interval=0.1,
    )
    assert body == b"hello from pykubelet busybox\n"

    # ExecSync: output, exit codes, and the runtime enforcing its timeout.
    result = await cri.exec_sync(container_id, ["cat", "/etc/hostname"], timeout_seconds=5)
    assert (result.exit_code, result.stdout.strip()) == (0, b"web")
    result = await cri.exec_sync(container_id, ["sh", "-c", "echo bad >&2; exit 3"], timeout_seconds=5)
    assert (result.exit_code, result.stderr) == (3, b"bad\n")
    with pytest.raises(DeadlineExceededError):
        await cri.exec_sync(container_id, ["sleep", "10"], timeout_seconds=1)

    # The CRI log file, where the kubelet's containerLogs endpoint will read it.
    log_path = pod_log_dir / "web" / "0.log"
    assert running.status.log_path == str(log_path)
    entries = await wait_for_async(lambda: _log_has(log_path, "started hello"), timeout=15.0, interval=0.1)
    assert ("stdout", "started hello") in [(e.stream, e.content) for e in entries]
    assert ("stderr", "to-stderr") in [(e.stream, e.content) for e in entries]
    await cri.reopen_container_log(container_id)

    # Streaming endpoints are handed out by the runtime's streaming server.
    for url in (
        await cri.exec(container_id, ["sh"], stdin=True),
        await cri.attach(container_id, stdout=True),
        await cri.port_forward(sandbox_id, [8080]),
    ):
        assert url.startswith("http://127.0.0.1:")

    stats = await cri.container_stats(container_id)
    assert stats.attributes.id == container_id
    assert stats.memory.working_set_bytes.value > 0
    assert container_id in {s.attributes.id for s in await cri.list_container_stats(sandbox_id=sandbox_id)}

    # Tear down step by step, checking each step took.
    await cri.stop_container(container_id, grace_seconds=2)
    stopped = await cri.container_status(container_id)
    assert stopped.status.state == pb.CONTAINER_EXITED
    assert stopped.status.finished_at >= stopped.status.started_at
    await cri.remove_container(container_id)
    with pytest.raises(NotFoundError):
        await cri.container_status(container_id)
    await cri.stop_pod_sandbox(sandbox_id)
    assert (await cri.pod_sandbox_status(sandbox_id)).status.state == pb.SANDBOX_NOTREADY
    await cri.stop_pod_sandbox(sandbox_id)  # idempotent, as the kubelet relies on
    await cri.remove_pod_sandbox(sandbox_id)
    await cri.remove_pod_sandbox(sandbox_id)
    with pytest.raises(NotFoundError):
        await cri.pod_sandbox_status(sandbox_id)
    assert await cri.list_pod_sandbox(labels={"io.kubernetes.pod.uid": sandbox.metadata.uid}) == []

    leaked = scope.leaked(before)
    assert not leaked, f"left behind: {leaked}"


async def _try_get(url: str) -> bytes | None:
    try:
        return await asyncio.to_thread(http_get, url)
    except OSError:
        return None


async def _log_has(path: Path, text: str):
    if not path.exists():
        return None
    entries = await asyncio.to_thread(read_log_file, str(path))
    return entries if any(e.content == text for e in entries) else None


@pytest.mark.parametrize(("exit_code", "reason"), [(0, "Completed"), (3, "Error")])
async def test_exit_codes_and_reasons(
    cri: CRIClient, test_images: RigImages, pod_log_dir: Path, exit_code: int, reason: str
) -> None:
    sandbox = sandbox_config(f"exit{exit_code}", pod_log_dir)
    sandbox_id = await cri.run_pod_sandbox(sandbox)
    try:
        await cri.pull_image(test_images.busybox)
        config = container_config("job", test_images.busybox, ["sh", "-c", f"exit {exit_code}"], sandbox)
        container_id = await cri.create_container(sandbox_id, config, sandbox)
        await cri.start_container(container_id)

        async def exited():
            st = (await cri.container_status(container_id)).status
            return st if st.state == pb.CONTAINER_EXITED else None

        st = await wait_for_async(exited, timeout=15.0, interval=0.1)
        assert (st.exit_code, st.reason) == (exit_code, reason)
    finally:
        await cri.stop_pod_sandbox(sandbox_id)
        await cri.remove_pod_sandbox(sandbox_id)


async def test_runtime_status_and_config(cri: CRIClient) -> None:
    status = await cri.status()
    conditions = {c.type: c.status for c in status.status.conditions}
    assert conditions == {"RuntimeReady": True, "NetworkReady": True}
    await cri.update_runtime_config("10.85.0.0/24")
    fs = await cri.image_fs_info()
    assert fs.image_filesystems and fs.image_filesystems[0].fs_id.mountpoint
