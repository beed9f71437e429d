"""A supervised child exits at start when the parent that started it is gone (the window before the
parent-death signal is armed)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from e2e.waiting import wait_for
from kubeclient import orphan


def test_a_child_whose_parent_is_still_there_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(orphan.PARENT_ENV, str(os.getppid()))
    orphan.exit_if_orphaned("scheduler")


def test_without_a_supervisor_nothing_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(orphan.PARENT_ENV, raising=False)
    orphan.exit_if_orphaned("scheduler")


def test_a_child_of_another_parent_exits_saying_why() -> None:
    env = {**os.environ, orphan.PARENT_ENV: "1"}  # init is never the parent of this child
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kubeclient.orphan import exit_if_orphaned; exit_if_orphaned('scheduler')",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "the API server that started this process (pid 1) is gone; exiting" in done.stderr


def test_the_supervisor_names_itself_in_the_childs_environment() -> None:
    assert orphan.parent_environment() == {orphan.PARENT_ENV: str(os.getpid())}


def test_a_running_child_whose_parent_dies_is_stopped() -> None:
    """The watch thread: the child's parent (a shell naming itself) is killed; the child stops."""
    child = (
        "import time; from kubeclient.orphan import watch_parent; "
        "watch_parent('scheduler', interval=0.05); time.sleep(30)"
    )
    script = f'export {orphan.PARENT_ENV}=$$; "$0" -c "$1" & wait'
    parent = subprocess.Popen(["sh", "-c", script, sys.executable, child])
    try:
        kids = wait_for(lambda: psutil.Process(parent.pid).children(), timeout=10, interval=0.05)
    finally:
        parent.kill()
        parent.wait()
    gone, alive = psutil.wait_procs(kids, timeout=10)
    assert not alive, "the child outlived its parent"
