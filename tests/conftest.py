"""Session-wide real parts for the test suite: a registry with the test images, the project's own pod
network (pykubelet-cni, served by its network service), and a containerd.

Every test that needs containerd shares one (starting one costs about 0.2 s, but pulling and the
first sandbox cost more); tests that need their own (teardown tests, other CNI set-ups) start one with
the same rig classes. All of it is torn down at the end of the session, and the last fixture to go
checks that nothing the session owns is left: every process, shim, mount and netns under the
session's temporary folder (where every daemon of every test keeps its state), and the veths, bridges
and NAT entries of the pod networks it leased (pykubelet.rig.leaks). The host's own state, and
another session running beside this one, are not the session's and are never reported.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from agent.cni.node import NodeNetwork
from agent.cni.service import BackgroundService
from agent.cri import CRIClient
from pykubelet.rig.containerd import Containerd
from pykubelet.rig.images import RigImages, publish_test_images
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import NetworkLease, lease_network
from pykubelet.rig.refcni import ReferenceBridgeNetwork
from pykubelet.rig.registry import Registry

# The pod networks this session leased (bridge, CIDR): the session-end check covers them.
SESSION_NETWORKS: list[NetworkLease] = []


# Fixtures that start a real server or daemon: a test standing on one is an integration test, whatever its
# file says. `./dev unit` (the stock-Python and newest-Python runs in CI) leaves these out.
_REAL_PART_FIXTURES = frozenset(
    {
        "registry",
        "test_images",
        "pod_network",
        "ref_network",
        "containerd",
        "cri",
        "apiserver",
        "etcd",
        "target",
        "stack",
        "kube",
        "kubeconfig",
        "cluster",
        "start_scheduler",
        "network",
        "network_factory",
        "service",
        "plugin",
        "reference",
        "namespaces",
        "csi_driver",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark integration what needs the real parts: every e2e scenario, every `*_integration.py` test and
    every test standing on a fixture that starts a server, a daemon or a network namespace."""
    for item in items:
        path = Path(str(item.fspath))
        if (
            "e2e" in path.parts
            or path.stem.endswith("_integration")
            or _REAL_PART_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        ):
            item.add_marker(pytest.mark.integration)


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: drives containerd and network namespaces")


@pytest.fixture(scope="session", autouse=True)
def _session_leaves_nothing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Set up first, so torn down last: after every other fixture of the session has gone."""
    yield
    scope = Scope.of(
        tmp_path_factory.getbasetemp(),
        bridges=[n.bridge for n in SESSION_NETWORKS],
        pod_cidrs=[n.pod_cidr for n in SESSION_NETWORKS],
    )
    leaked = scope.leaked()
    for lease in SESSION_NETWORKS:
        lease.release()
    assert not leaked, f"the session left these on the host: {leaked}"


def session_network(tag: str) -> NetworkLease:
    """A bridge name and pod CIDR no other session on this host uses, checked at session end."""
    lease = lease_network(tag)
    SESSION_NETWORKS.append(lease)
    return lease


@pytest.fixture(scope="session")
def rig_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Kept short: unix socket paths are limited to 108 bytes.
    return tmp_path_factory.mktemp("rig")


@pytest.fixture(scope="session")
def registry(rig_dir: Path) -> Iterator[Registry]:
    _need_root()
    with Registry(rig_dir / "registry") as reg:
        yield reg


@pytest.fixture(scope="session")
def test_images(registry: Registry) -> RigImages:
    return publish_test_images(registry.address)


@pytest.fixture(scope="session")
def pod_network(rig_dir: Path) -> Iterator[NodeNetwork]:
    """Our CNI plugin with its service running, as the agent runs it on a node."""
    _need_root()
    lease = session_network("r")
    net = NodeNetwork(
        conf_dir=rig_dir / "cni-conf",
        bin_dir=rig_dir / "cni-bin",
        data_dir=rig_dir / "cni-data",
        pod_cidr=lease.pod_cidr,
        bridge=lease.bridge,
        socket_path=str(rig_dir / "cni.sock"),
    )
    net.write()
    service = BackgroundService(net.socket_path).start()
    yield net
    service.stop()
    net.remove()  # (again, if containerd's teardown did it: remove() is idempotent)


@pytest.fixture(scope="session")
def ref_network(rig_dir: Path) -> Iterator[ReferenceBridgeNetwork]:
    """The reference bridge + host-local plugins, for tests that compare against them."""
    _need_root()
    lease = session_network("f")
    net = ReferenceBridgeNetwork(
        conf_dir=rig_dir / "ref-cni-conf",
        data_dir=rig_dir / "ref-cni-data",
        bridge=lease.bridge,
        subnet=lease.pod_cidr,
    )
    net.write()
    yield net
    net.remove()


@pytest.fixture(scope="session")
def containerd(
    rig_dir: Path, registry: Registry, test_images: RigImages, pod_network: NodeNetwork
) -> Iterator[Containerd]:
    """The shared containerd, on our pod network; torn down at session end."""
    ctd = Containerd(
        rig_dir / "containerd",
        cni_bin_dir=pod_network.bin_dir,
        cni_conf_dir=pod_network.conf_dir,
        sandbox_image=test_images.pause,
        registry=registry.address,
    )
    ctd.start()
    yield ctd
    left = ctd.stop()
    pod_network.remove()
    assert left.empty(), f"containerd teardown left {left}"


@pytest.fixture
async def cri(containerd: Containerd) -> AsyncIterator[CRIClient]:
    async with await CRIClient.connect(containerd.endpoint) as client:
        yield client


@pytest.fixture
def pod_log_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pod-logs"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)
