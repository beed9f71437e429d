"""The parts of `pykubelet down` that decide what is a stack's (the end-to-end cases, with real stacks
killed at every stage, are in test_down_after_interrupted_up.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cni.conflist import write_conflist
from pykubelet.rig import host
from pykubelet.rig.stack import DEFAULT_STATE_DIR, StackRecord
from pykubelet.rig.sweep import (
    StackNetwork,
    find_network,
    looks_like_a_stack,
    moved_state_dirs,
    sweep,
    ups_for,
)

pytestmark = pytest.mark.integration  # real servers, etcd or processes


def test_a_folder_that_holds_no_stack_is_left_alone(tmp_path: Path) -> None:
    """`down --state-dir` given the wrong folder must not kill what names it."""
    (tmp_path / "data").mkdir()
    bystander = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "data")]
    )
    try:
        assert not looks_like_a_stack(tmp_path)
        assert sweep(tmp_path) == []
        assert bystander.poll() is None
        assert (tmp_path / "data").is_dir()
    finally:
        bystander.kill()
        bystander.wait()


def test_the_network_comes_from_the_record_or_else_from_the_agents_conflist(tmp_path: Path) -> None:
    assert find_network(tmp_path, None) is None  # no pod was ever attached: no bridge to remove
    write_conflist(tmp_path / "cni" / "net.d", "10.200.42.0/24", bridge="pykx42")
    assert looks_like_a_stack(tmp_path)
    assert find_network(tmp_path, None) == StackNetwork("pykx42", "10.200.42.0/24")
    record = StackRecord(str(tmp_path), "n", "", {}, "", "", "pykrec0", "10.200.44.0/24")
    assert find_network(tmp_path, record) == StackNetwork("pykrec0", "10.200.44.0/24")


def _sleeper(*args: str, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    """A process whose command line names `args`, as a stack's daemon names its files."""
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", code, *args])


def test_the_processes_of_a_state_dir_that_is_gone_are_stopped_and_only_those(tmp_path: Path) -> None:
    """A stack whose folder was removed (pytest prunes old tmp_paths) still runs: its processes name
    the state dir, so down stops them, escalating to SIGKILL for one that ignores SIGTERM, and leaves
    a sibling state dir's processes (a common prefix: state-2) alone."""
    state, sibling = tmp_path / "state", tmp_path / "state-2"
    ours = [
        _sleeper("--config", str(state / "containerd" / "config.toml")),
        _sleeper("--kubeconfig", str(state / "agent" / "kubelet.kubeconfig"), ignore_term=True),
        _sleeper(f"--data-dir={state / 'apiserver'}"),
    ]
    theirs = [
        _sleeper("--config", str(sibling / "containerd" / "config.toml")),
        _sleeper("--kubeconfig", str(sibling / "agent" / "kubelet.kubeconfig")),
    ]
    try:
        assert not state.exists()
        assert looks_like_a_stack(state)  # by its processes alone
        assert sweep(state) == []  # nothing left, as down verified
        # Ended, the one that ignores SIGTERM too (only SIGKILL could end it; down reaped them, so
        # their exit status is not ours to read).
        assert [p.poll() is not None for p in ours] == [True, True, True]
        assert [p.poll() for p in theirs] == [None, None]
        assert not looks_like_a_stack(state)
    finally:
        for proc in ours + theirs:
            proc.kill()
            proc.wait()


def test_an_up_on_the_default_state_dir_is_found_and_never_the_caller(tmp_path: Path) -> None:
    """`pykubelet up` without --state-dir runs on the default one; an `up` sweeping what an earlier
    stack left finds the other `up`s, never itself."""
    fake_up = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "pykubelet", "up", "--no-example"]
    )
    try:
        assert fake_up.pid in {p.pid for p in ups_for(DEFAULT_STATE_DIR)}
        assert fake_up.pid not in {p.pid for p in ups_for(tmp_path)}
        assert os.getpid() not in {p.pid for p in ups_for(DEFAULT_STATE_DIR)}
    finally:
        fake_up.kill()
        fake_up.wait()


def test_down_says_when_there_is_no_stack_instead_of_claiming_it_stopped_one(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pykubelet", "down", "--state-dir", str(tmp_path / "never-up")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "nothing to stop" in result.stderr and "stopped" not in result.stderr, result.stderr


def test_the_mounts_of_a_state_dir_moved_away_are_found_from_its_processes_logs(tmp_path: Path) -> None:
    """The state dir renamed away (pytest's pruning renames an old tmp_path's ancestor) while its agent
    runs with a tmpfs volume mounted: the agent's log (its stdout) says where the folder is now, so
    down unmounts the volume there; a folder of another name beside it is not the stack's."""
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a tmpfs")
    state = tmp_path / "run" / "state"
    volume = state / "agent" / "pods" / "uid-1" / "volumes" / "kubernetes.io~empty-dir" / "cache"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], check=True)
    with open(state / "agent" / "agent.log", "wb") as log:
        agent = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", "--root-dir", str(state / "agent")],
            stdout=log,
        )
    moved = tmp_path / "garbage-run" / "state"
    os.rename(tmp_path / "run", moved.parent)
    try:
        found = host.processes_of([str(state / "agent")])
        assert [p.pid for p in found] == [agent.pid]
        assert moved_state_dirs(state, found) == [moved]
        assert sweep(state) == []
        assert agent.poll() is not None
        assert not host.mounts_under([str(tmp_path)])
    finally:
        agent.kill()
        agent.wait()
        host.unmount_all_under([str(tmp_path)])
