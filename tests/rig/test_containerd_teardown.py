"""A containerd's teardown leaves nothing behind, also after the daemon was killed with -9; and the leak
scope sees what a containerd of the session owns (its shims, the containers under them, its mounts, its
sandboxes' netns and their veths) while it is there."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psutil
import pytest

from agent.cri import CRIClient, pb
from pykubelet.rig.containerd import (
    Containerd,
    network_namespace,
    oom_score_adj_restricted,
    sandbox_runtime_spec,
)
from pykubelet.rig.images import RigImages
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import lease_network
from pykubelet.rig.process import run_blocking
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry

pytestmark = pytest.mark.integration


@pytest.fixture
def own_containerd(tmp_path: Path, registry: Registry, test_images: RigImages):
    with lease_network("t") as lease:
        net = ReferenceBridgeNetwork(
            conf_dir=tmp_path / "conf",
            data_dir=tmp_path / "ipam",
            name="teardown",
            bridge=lease.bridge,
            subnet=lease.pod_cidr,
        )
        net.write()
        ctd = Containerd(
            tmp_path / "ctd",
            cni_bin_dir=net.bin_dir,
            cni_conf_dir=net.conf_dir,
            sandbox_image=test_images.pause,
            registry=registry.address,
        )
        yield ctd, net
        ctd.stop()
        net.remove()


def scope_of(ctd: Containerd, net: ReferenceBridgeNetwork) -> Scope:
    return Scope.of(ctd.state_dir, bridges=[net.bridge], pod_cidrs=[net.subnet])


async def _run_pod(endpoint: str, image: str) -> tuple[str, str, str]:
    """A sandbox with one running container; returns (sandbox id, container id, netns path)."""
    async with await CRIClient.connect(endpoint) as cri:
        uid = str(uuid.uuid4())
        sandbox = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name="td", uid=uid, namespace="default"),
            hostname="td",
            labels={"io.kubernetes.pod.uid": uid},
        )
        sandbox_id = await cri.run_pod_sandbox(sandbox)
        await cri.pull_image(image)
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="sleeper"),
            image=pb.ImageSpec(image=image),
            command=["sleep", "3600"],
        )
        container_id = await cri.create_container(sandbox_id, config, sandbox)
        await cri.start_container(container_id)
        status = await cri.pod_sandbox_status(sandbox_id, verbose=True)
        netns = network_namespace(sandbox_runtime_spec(status))
        assert netns is not None
        return sandbox_id, container_id, netns


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_config_reflects_the_machine(own_containerd) -> None:
    ctd, net = own_containerd
    config = ctd.render_config()
    expected = "true" if oom_score_adj_restricted() else "false"
    assert f"restrict_oom_score_adj = {expected}" in config
    assert f'bin_dir = "{net.bin_dir}"' in config and f'conf_dir = "{net.conf_dir}"' in config
    assert f'sandbox_image = "{ctd.sandbox_image}"' in config
    assert f'mirrors."{ctd.registry}"' in config and 'mirrors."docker.io"' in config


def test_clean_stop_leaves_nothing(own_containerd, test_images: RigImages) -> None:
    ctd, net = own_containerd
    scope = scope_of(ctd, net)
    ctd.start()
    _, _, netns = run_blocking(lambda: _run_pod(ctd.endpoint, test_images.busybox))
    assert os.path.exists(netns) and ctd.shim_pids()
    # The sandbox's netns lives under the runtime's own state, not in the host-wide /var/run/netns.
    assert netns.startswith(str(ctd.state_dir) + "/"), netns

    left = ctd.stop()
    assert left.empty(), left
    assert not os.path.exists(netns)
    assert not ctd.state_dir.exists()
    net.remove()
    assert not scope.leaked()


def test_stop_after_kill_9_leaves_nothing(own_containerd, test_images: RigImages) -> None:
    """containerd dies with its pods running: the shims, mounts and netns must still be cleaned up."""
    ctd, net = own_containerd
    scope = scope_of(ctd, net)
    ctd.start()
    _, _, netns = run_blocking(lambda: _run_pod(ctd.endpoint, test_images.busybox))
    shims = ctd.shim_pids()
    assert shims
    ctd.daemon.kill()

    # What the dead runtime leaves is what the leak scope reports: every kind of it.
    left_by_the_crash = scope.owned().as_dict()
    assert {"shims", "processes", "mounts", "netns", "veths"} <= left_by_the_crash.keys(), left_by_the_crash
    assert left_by_the_crash["netns"] == [netns]
    assert all(f"on {net.bridge}" in v for v in left_by_the_crash["veths"])
    assert {int(s.split()[0]) for s in left_by_the_crash["shims"]} == set(shims)
    sockets = ctd.shim_sockets()
    assert sockets  # the shims' sockets in /run/containerd/s, named from our socket and the task ids

    left = ctd.stop()
    assert left.empty(), left
    assert not os.path.exists(netns)
    assert not any(_alive(pid) for pid in shims)
    assert not any(s.exists() for s in sockets)
    net.remove()
    leaked = scope.leaked()
    # The sandbox's veth went with its netns; nothing else may remain either.
    assert not leaked, leaked
