"""The parts of `pykubelet down` that decide what is a stack's (the end-to-end cases, with real stacks
killed at every stage, are in test_down_after_interrupted_up.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent.cni.conflist import write_conflist
from pykubelet.rig.stack import StackRecord
from pykubelet.rig.sweep import StackNetwork, find_network, looks_like_a_stack, sweep


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
