"""Real parts for the CNI tests: network namespaces, a test bridge network, the installed plugin
executable and the network service. Everything made here is removed again at teardown, and the
network fixture fails the test if a veth, an IP file or a NAT rule of its own was left behind."""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cni.install import install_plugins

# isort: off
sys.path.insert(0, str(Path(__file__).parent))  # the helpers module beside this file
from cnitest import Namespaces, Plugin, PodNetwork, ServiceThread, need_root, new_network
# isort: on


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    need_root()
    ns = Namespaces()
    try:
        yield ns
    finally:
        ns.close()


# -- the test network ---------------------------------------------------------------------------


@pytest.fixture
def network(tmp_path: Path) -> Iterator[PodNetwork]:
    need_root()
    net = new_network(tmp_path)
    try:
        yield net
        # what a test leaves behind of its own network is a defect of the plugin or of the test
        assert net.bridge_ports() == [], "veths left on the bridge"
        assert net.ip_files() == [], "IP files left in the IPAM dir"
        assert net.nat_rules() == [], "DNAT rules left"
    finally:
        net.remove()


@pytest.fixture
def network_factory(tmp_path: Path) -> Iterator[Any]:
    need_root()
    made: list[PodNetwork] = []

    def make() -> PodNetwork:
        net = new_network(tmp_path)
        made.append(net)
        return net

    try:
        yield make
    finally:
        for net in made:
            net.remove()


# -- the plugin and the service -----------------------------------------------------------------


@pytest.fixture(scope="session")
def cni_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cni")


@pytest.fixture(scope="session")
def socket_path(cni_dir: Path) -> str:
    return str(cni_dir / "cni.sock")


@pytest.fixture(scope="session")
def plugin_bin(cni_dir: Path, socket_path: str) -> Path:
    """The installed fast executable (C shim) with `loopback` beside it."""
    bin_dir = cni_dir / "bin"
    install_plugins(bin_dir, socket_path)
    return bin_dir


@pytest.fixture
def service(socket_path: str) -> Iterator[ServiceThread]:
    need_root()
    svc = ServiceThread(socket_path).start()
    try:
        yield svc
    finally:
        svc.stop()
    assert not os.path.exists(socket_path), "service left its socket"


@pytest.fixture
def plugin(plugin_bin: Path, socket_path: str) -> Plugin:
    """Our plugin as containerd would run it (through the service when one is running)."""
    return Plugin(plugin_bin / "pykubelet-cni", {"PYKUBELET_CNI_SOCKET": socket_path})


@pytest.fixture
def reference() -> Plugin:
    if not Path("/usr/lib/cni/bridge").exists():
        pytest.skip("reference CNI plugins not installed")
    return Plugin(Path("/usr/lib/cni/bridge"))


@pytest.fixture(scope="session", autouse=True)
def _one_cni_session_at_a_time() -> Iterator[None]:
    """Test networks, bridge names and hostPorts are fixed per session: two sessions of this suite on
    one machine (a developer and `./dev test`) would trip over each other, so they take turns."""
    if os.geteuid() != 0:
        yield
        return
    os.makedirs("/run/pykubelet", exist_ok=True)
    fd = os.open("/run/pykubelet/cni-tests.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
