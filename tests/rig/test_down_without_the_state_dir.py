"""`pykubelet down` stops a stack whose state dir is gone while the stack runs on: the case found by
hand, an `up` that outlived its SIGTERM (or was killed with SIGKILL) in a test whose tmp_path pytest
later pruned (it renames the folder to garbage-* and deletes what it can). `down --state-dir <it>`
used to find no record and no folder, print "stopped" and leave every daemon, shim, mount, the bridge
and the service proxy's nft table in place.

Each case ends with nothing of the stack on the host: no process naming the state dir, no shim, no
mount under the test's folder (where the moved dir is), no bridge, no proxy table; and a sibling
state dir's processes (a common prefix, `s-2` beside `s`) still run.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pykubelet.rig import host
from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import NetworkLease, lease_network
from pykubelet.rig.stack import proxy_table
from tests.rig.test_down_after_interrupted_up import UP_TIMEOUT, down, up_argv, wait_for_stage

pytestmark = pytest.mark.integration


@pytest.fixture
def net() -> Iterator[NetworkLease]:
    if os.geteuid() != 0:
        pytest.skip("needs root: `pykubelet up` runs containerd and pod networking")
    with lease_network("g") as lease:
        yield lease


def sandbox_running(state: Path) -> bool:
    """The sample pod's sandbox runs: its shim serves the stack's containerd."""
    return any(p.is_shim for p in host.processes_of([str(state)]))


def prune(folder: Path, garbage: Path) -> None:
    """What pytest does to an old basetemp: rename it, then delete what it can."""
    os.rename(folder, garbage)
    shutil.rmtree(garbage, ignore_errors=True)


def remains(state: Path, garbage: Path, net: NetworkLease) -> dict[str, list[str]]:
    """Everything of the stack still on the host: what its state dir and the moved folder own (processes,
    shims, mounts, netns), its bridge and veths, its proxy table."""
    scope = Scope.of(
        state,
        garbage / "s",
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}"],
    )
    return scope.leaked(settle=5)


def kill_leftovers(state: Path, garbage: Path, net: NetworkLease) -> None:
    """A failed test's teardown: down, then SIGKILL what names the folder, unmount, the bridge and table."""
    down(state)
    for proc in host.processes_of([str(state), str(garbage / "s")]):
        try:
            psutil.Process(proc.pid).kill()
        except psutil.Error:
            pass
    host.unmount_all_under([str(garbage)])
    subprocess.run(["ip", "link", "del", net.bridge], capture_output=True, check=False)
    subprocess.run(
        ["nft", "delete", "table", "ip", proxy_table(net.bridge)], capture_output=True, check=False
    )


@pytest.fixture
def sibling(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes of another state dir (a common prefix), running all along."""
    other = tmp_path / "r" / "s-2"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", "--config", str(other / part / "config")]
        )
        for part in ("containerd", "agent", "apiserver")
    ]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("how", ["completed", "SIGKILL"])
def test_down_stops_a_stack_whose_state_dir_is_gone(how: str, tmp_path: Path, net, sibling) -> None:
    """`completed`: up ran to the end, as one that outlived its SIGTERM did; `SIGKILL`: up killed once
    the sample pod's sandbox runs, so only its children remain. Then the folder is pruned."""
    # Short names: containerd's ttrpc socket path under the state dir must stay within 104 bytes.
    run, garbage = tmp_path / "r", tmp_path / "garbage-r"
    state = run / "s"
    run.mkdir()
    log = tmp_path / "up.log"
    try:
        with open(log, "wb") as out:
            up = subprocess.Popen(up_argv(state, net, example=True), stdout=out, stderr=out)
        try:
            if how == "SIGKILL":
                wait_for_stage(up, state, sandbox_running, log)
                up.send_signal(signal.SIGKILL)
            returncode = up.wait(timeout=UP_TIMEOUT)
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        assert returncode == (-signal.SIGKILL if how == "SIGKILL" else 0), log.read_text()[-2000:]
        prune(run, garbage)
        left = remains(state, garbage, net)
        # The stack runs on without its folder: down has real work to do. (After the SIGKILL the agent
        # may stop the sandbox whose bundle went away, so its shim is not always there.)
        assert {"processes", "mounts", "bridges", "nft"} <= left.keys(), left
        assert how == "SIGKILL" or "shims" in left, left
        assert any(str(garbage) in m for m in left["mounts"]), left

        result = down(state)
        assert result.returncode == 0, result.stderr
        assert "stopped" in result.stderr
        leaked = remains(state, garbage, net)
        assert not leaked, f"`pykubelet down` of a stack whose state dir is gone ({how}) left {leaked}"
        assert [p.poll() for p in sibling] == [None, None, None]  # another state dir's, untouched
    finally:
        kill_leftovers(state, garbage, net)
