"""`pykubelet down` leaves nothing of a state dir, however its `up` ended: killed at each stage of
starting the stack (SIGTERM, which `up` answers by stopping what it started, and SIGKILL, which leaves
everything to `down`), or with the stack's daemons crashed and its record gone.

The stages are read from the state dir, as `down` would read it: the record's entries for the daemons
that are up, and containerd's task bundles for the sample pod's sandbox. Afterwards nothing the state
dir owns may remain: processes, shims, sandboxes' netns, mounts, veths on the stack's bridge, the
bridge, NAT entries for its CIDR (pykubelet.rig.leaks).
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pykubelet.rig.leaks import Scope
from pykubelet.rig.netlease import NetworkLease, lease_network
from pykubelet.rig.process import free_port
from pykubelet.rig.stack import RECORD_FILE, StackRecord, netpolicy_table, proxy_table

pytestmark = pytest.mark.integration

UP_TIMEOUT = 240.0


def _ready(name: str) -> Callable[[Path], bool]:
    def reached(state: Path) -> bool:
        record = StackRecord.load(state)
        return record is not None and name in record.ready

    return reached


def _sandbox_started(state: Path) -> bool:
    """The sample pod's sandbox has a running shim: its task bundle holds `address`, which the shim's
    start writes once the shim runs (the bundle folder itself comes first, so a SIGKILL right after it
    could take containerd down before any shim ran); the CRI plugin sets up the netns and veth before."""
    bundles = state / "containerd" / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
    return any(bundles.glob("*/address"))


STAGES: dict[str, Callable[[Path], bool]] = {
    "registry": _ready("registry"),
    "containerd": _ready("containerd"),
    "apiserver": _ready("apiserver"),
    "dns": _ready("dns"),
    "agent": _ready("agent"),
    "proxy": _ready("proxy"),
    "metrics-server": _ready("metrics-server"),
    # (the ingress controller's stage is not killed on its own: the sample pod's comes right after it, with
    # the controller and its nginx running, for down to sweep)
    "sample-pod": _sandbox_started,
}


# `up`'s stages as it reports them (pykubelet.progress), in order, and the one under way or just ending
# when each STAGES entry is reached.
REPORTED = [
    "packages", "registry", "images", "containerd", "API server", "DNS", "node kill-test", "scheduler",
    "controllers", "service proxy", "network policies", "metrics server", "ingress controller", "CSI driver", "supervisor",
    "sample pod",
]  # fmt: skip
REPORTED_AT = {
    "registry": "registry",
    "containerd": "containerd",
    "apiserver": "API server",
    "dns": "DNS",
    "agent": "node kill-test",
    "proxy": "service proxy",
    "metrics-server": "metrics server",
    "sample-pod": "sample pod",
}


def interrupted_position(output: str) -> float:
    """Where `up` says the signal stopped it: a stage's index in REPORTED, or half-way past the last
    finished one when it came between stages."""
    during = re.findall(r"^pykubelet: (.+) interrupted after \d+\.\d s \(SIGTERM\)$", output, re.M)
    between = re.findall(r"^pykubelet: interrupted after (.+) \(SIGTERM\)$", output, re.M)
    assert len(during) + len(between) == 1, output
    return REPORTED.index(during[0]) if during else REPORTED.index(between[0]) + 0.5


@pytest.fixture
def net() -> Iterator[NetworkLease]:
    if os.geteuid() != 0:
        pytest.skip("needs root: `pykubelet up` runs containerd and pod networking")
    with lease_network("k") as lease:
        yield lease


def up_argv(state: Path, net: NetworkLease, example: bool) -> list[str]:
    argv = [
        "pykubelet",
        "up",
        "--state-dir",
        str(state),
        "--api-port",
        str(free_port()),
        "--node-name",
        "kill-test",
        "--pod-cidr",
        net.pod_cidr,
        "--bridge",
        net.bridge,
    ]
    return argv if example else [*argv, "--no-example"]


def wait_for_stage(
    up: subprocess.Popen[bytes], state: Path, reached: Callable[[Path], bool], log: Path
) -> None:
    deadline = time.monotonic() + UP_TIMEOUT
    while not reached(state):
        if up.poll() is not None:
            raise AssertionError(f"up ended ({up.returncode}) before the stage:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"stage not reached in {UP_TIMEOUT} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.02)


def down(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["pykubelet", "down", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_down_cleans_up_after_up_was_killed(stage: str, signum: signal.Signals, tmp_path: Path, net) -> None:
    state = tmp_path / "state"
    scope = Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}", f"inet {netpolicy_table(net.bridge)}"],
    )
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        # The sample pod keeps `up` busy after its last daemon is ready: without it `up` may be done
        # before the signal for the metrics-server stage arrives. The earlier stages are killed before
        # the pod anyway.
        example = stage in ("metrics-server", "sample-pod")
        up = subprocess.Popen(up_argv(state, net, example=example), stdout=out, stderr=out)
    try:
        wait_for_stage(up, state, STAGES[stage], log)
        up.send_signal(signum)
        returncode = up.wait(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    try:
        assert returncode == -signum or returncode == 128 + signum, (returncode, log.read_text()[-2000:])
        left_by_up = scope.owned().as_dict()
        if signum == signal.SIGTERM:
            # `up` says where it stopped: the stage reached or a later one, never an earlier one, and
            # it reported exactly the stages before that one finished.
            output = log.read_text()
            position = interrupted_position(output)
            assert position >= REPORTED.index(REPORTED_AT[stage]), output
            finished = re.findall(r"^pykubelet: (\S.*?) +\d+\.\d s$", output, re.M)
            assert finished == REPORTED[: math.ceil(position)], output
        if signum == signal.SIGKILL:
            # Nothing stopped the stack: down has real work to do (not a vacuous pass).
            assert "processes" in left_by_up, left_by_up
            if stage == "sample-pod":
                assert {"shims", "netns", "veths", "bridges"} <= left_by_up.keys(), left_by_up
    except AssertionError:
        down(state)  # a failure here must not leave a stack for the next test's network lease
        raise

    result = down(state)
    assert result.returncode == 0, result.stderr
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` after {signum.name} at {stage} left {leaked}"
    assert not (state / RECORD_FILE).exists()


def test_down_cleans_up_a_crashed_stack_without_its_record(tmp_path: Path, net) -> None:
    """The daemons die (SIGKILL, as a crash or the OOM killer would) with the sample pod running, and the
    record is lost too: down finds everything from the state dir alone."""
    state = tmp_path / "state"
    scope = Scope.of(
        state,
        bridges=[net.bridge],
        pod_cidrs=[net.pod_cidr],
        nft_tables=[f"ip {proxy_table(net.bridge)}", f"inet {netpolicy_table(net.bridge)}"],
    )
    up = subprocess.run(
        up_argv(state, net, example=True), capture_output=True, text=True, timeout=UP_TIMEOUT, check=False
    )
    try:
        assert up.returncode == 0, up.stderr
        record = StackRecord.load(state)
        assert record is not None
        for name in ("agent", "apiserver", "containerd"):
            os.kill(record.pids[name], signal.SIGKILL)
        (state / RECORD_FILE).unlink()
        left = scope.owned().as_dict()
        assert {"processes", "shims", "netns", "veths", "bridges"} <= left.keys(), left
    finally:
        result = down(state)
    assert result.returncode == 0, result.stderr
    leaked = scope.leaked()
    assert not leaked, f"`pykubelet down` of a crashed stack left {leaked}"
