"""The wheel, installed into a fresh virtual environment outside the checkout, runs the cluster: `pykubelet
up` from that environment brings the sample pod to Ready and `pykubelet down` leaves nothing. Nothing is
imported from the checkout: the commands run from a folder outside it, with no PYTHONPATH and a PATH of
the new environment and the system's folders only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import NetworkLease, lease_network
from pykubelet.rig.process import free_port
from pykubelet.rig.stack import StackRecord, proxy_table
from tests.packaging.wheel import CHECKOUT, build_wheel

pytestmark = pytest.mark.integration

SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@pytest.fixture
def net() -> Iterator[NetworkLease]:
    if os.geteuid() != 0:
        pytest.skip("needs root: `pykubelet up` runs containerd and pod networking")
    with lease_network("w") as lease:
        yield lease


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_wheel_in_a_fresh_venv_runs_the_sample_pod(tmp_path: Path, net: NetworkLease) -> None:
    assert not tmp_path.resolve().is_relative_to(CHECKOUT)
    wheel = build_wheel(tmp_path / "build")
    venv, state, work = tmp_path / "venv", tmp_path / "state", tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{SYSTEM_PATH}"
    made = _run([sys.executable, "-m", "venv", str(venv)], work, env, 120)
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin" / "python")
    installed = _run(
        [python, "-m", "pip", "install", "-q", "-c", str(CHECKOUT / "constraints.txt"), str(wheel)],
        work,
        env,
        900,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # Every package of the project comes from the new environment, none from the checkout.
    where = _run(
        [python, "-c", "import agent, controlplane, pykubelet, serviceproxy, clusterdns; "
         "print('\\n'.join(m.__file__ for m in (agent, controlplane, pykubelet, serviceproxy, clusterdns)))"],
        work, env, 60,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert all(Path(f).is_relative_to(venv) for f in where.stdout.split()), where.stdout

    scope = Scope.of(
        state, bridges=[net.bridge], pod_cidrs=[net.pod_cidr], nft_tables=[f"ip {proxy_table(net.bridge)}"]
    )
    pykubelet = str(venv / "bin" / "pykubelet")
    up = _run(
        [pykubelet, "up", "--state-dir", str(state), "--api-port", str(free_port()), "--node-name", "wheel-test",
         "--pod-cidr", net.pod_cidr, "--bridge", net.bridge],
        work, env, 600,
    )  # fmt: skip
    record = StackRecord.load(state)
    try:
        assert up.returncode == 0, up.stderr
        assert record is not None
        ready = _run(
            ["kubectl", "--kubeconfig", record.kubeconfig, "get", "pod", "hello", "-o",
             'jsonpath={.spec.nodeName} {.status.conditions[?(@.type=="Ready")].status}'],
            work, env, 60,
        )  # fmt: skip
        assert ready.returncode == 0, ready.stderr
        assert ready.stdout.split() == ["wheel-test", "True"]
        # The daemons run from the new environment too.
        agent_cmdline = Path(f"/proc/{record.pids['agent']}/cmdline").read_bytes().split(b"\0")
        assert Path(agent_cmdline[0].decode()).is_relative_to(venv), agent_cmdline
    finally:
        down = _run([pykubelet, "down", "--state-dir", str(state)], work, env, 180)
    assert down.returncode == 0, down.stderr
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` left {leaked}"
