"""`pykubelet join --cri-socket`: a runtime already on the host is used as kubeadm uses it (the agent
points at it, join starts and installs no containerd of its own and leaves the pod network to the
runtime's CNI configuration), and a socket that is not there stops join at preflight."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from pykubelet.join import AGENT_UNIT, CONTAINERD_UNIT, NodePlan, agent_argv, cri_endpoint, units


def plan(tmp_path: Path, cri_socket: str) -> NodePlan:
    return NodePlan(tmp_path, "n3", "", "br0-3", 10250, "pause", "", False, cri_socket)


def test_kubeadms_spellings_of_the_socket() -> None:
    assert cri_endpoint("/run/containerd/containerd.sock") == "unix:///run/containerd/containerd.sock"
    assert cri_endpoint("unix:///run/crio/crio.sock") == "unix:///run/crio/crio.sock"
    assert cri_endpoint("") == ""


def test_the_agent_uses_the_hosts_runtime_and_its_pod_network(tmp_path: Path) -> None:
    endpoint = "unix:///run/containerd/containerd.sock"
    argv = agent_argv(plan(tmp_path, endpoint), endpoint)
    assert argv[argv.index("--container-runtime-endpoint") + 1] == endpoint
    assert not [a for a in argv if a.startswith("--cni-")]
    written = units(plan(tmp_path, endpoint), None, argv)
    assert list(written) == [AGENT_UNIT]
    assert CONTAINERD_UNIT not in written[AGENT_UNIT]
    own = agent_argv(plan(tmp_path, ""), "unix:///x/containerd.sock")  # without --cri-socket: our network
    assert "--cni-conf-dir" in own


def test_a_missing_socket_stops_join_at_preflight(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.sock"
    argv = [
        sys.executable,
        "-m",
        "pykubelet",
        "join",
        "https://127.0.0.1:1",
        "--token",
        "abcdef.0123456789abcdef",
    ]
    argv += ["--root-dir", str(tmp_path / "node"), "--cri-socket", str(missing)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"container runtime is not running: no CRI socket at unix://{missing}" in done.stderr
    listening = socket.socket(
        socket.AF_UNIX
    )  # a socket that is there passes preflight (discovery fails next)
    try:
        listening.bind(str(tmp_path / "cri.sock"))
        argv[-1] = str(tmp_path / "cri.sock")
        argv += ["--discovery-timeout", "1s"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert "container runtime is not running" not in done.stderr
        assert "pykubelet join: discovery of https://127.0.0.1:1" in done.stderr
    finally:
        listening.close()
