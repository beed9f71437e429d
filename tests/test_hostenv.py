"""pykubelet's own environment on a host: which one is chosen, a missing or unusable one refused with a
message naming it, and the units `pykubelet join` writes starting the agent from it."""

from __future__ import annotations

import configparser
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pykubelet.hostenv import DEFAULT_VENV, VenvError, check_venv, chosen_venv
from pykubelet.join import AGENT_UNIT, units
from pykubelet.rig.nodeplan import NodePlan, agent_argv


def test_the_environment_is_the_named_one_the_running_one_or_the_hosts() -> None:
    assert chosen_venv({"PYKUBELET_VENV": "/srv/venv"}, "/x", "/x") == Path("/srv/venv")
    assert chosen_venv({}, "/work/.venv", "/usr") == Path("/work/.venv")  # running from a venv
    assert chosen_venv({}, "/usr", "/usr") == DEFAULT_VENV  # the system Python


def test_a_missing_environment_is_named_with_how_to_make_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "venv"
    with pytest.raises(VenvError) as err:
        check_venv(missing)
    assert f"the virtual environment {missing} does not exist" in str(err.value)
    assert f"python3 -m venv {missing} && {missing}/bin/pip install" in str(err.value)


def test_a_folder_that_is_no_environment_is_named(tmp_path: Path) -> None:
    with pytest.raises(VenvError, match=f"{tmp_path} is not a virtual environment"):
        check_venv(tmp_path)


def test_an_environment_without_pykubelet_is_named(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    with pytest.raises(VenvError, match=f"pykubelet is not installed in the virtual environment {venv}"):
        check_venv(venv)


def test_an_unreadable_environment_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any folder")
    venv = tmp_path / "venv"
    venv.mkdir(mode=0o000)
    try:
        with pytest.raises(VenvError, match=f"the virtual environment {venv} is not readable"):
            check_venv(venv)
    finally:
        venv.chmod(0o755)


def test_the_running_environment_passes() -> None:
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment")
    assert check_venv(Path(sys.prefix)) == Path(sys.prefix) / "bin" / "python"


def test_joins_agent_unit_runs_from_the_environment(tmp_path: Path) -> None:
    plan = NodePlan(tmp_path, "n1", "", "pykbr9", 10250, "pause", "", False)
    python = str(DEFAULT_VENV / "bin" / "python")
    text = units(plan, ["/usr/bin/containerd"], agent_argv(plan, "unix:///s", python))[AGENT_UNIT]
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(text)
    assert shlex.split(unit["Service"]["ExecStart"])[:4] == [python, "-m", "pykubelet", "agent"]
    assert "PYTHONPATH" not in text  # the environment holds the package; nothing from a checkout
