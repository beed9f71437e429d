"""`./dev`, the front door: it refuses what it cannot do with a message naming the culprit, before it
touches anything, and the lock file it installs from pins every dependency the project declares.

The happy path (a venv made with the system Python, the unit tests run in it) is CI's own first step
(`./dev test` under CI=true), so it is not repeated here.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "dev"


def _dev(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEV), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


def test_an_unwritable_venv_folder_is_named(tmp_path: Path) -> None:
    # root writes anywhere, so a folder under a plain file stands in for one nobody can create
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = _dev("install", PYKUBELET_VENV=str(blocker / "venv"))
    assert out.returncode != 0
    assert str(blocker) in out.stderr and "virtual environment" in out.stderr, out.stderr


def test_a_python_older_than_3_11_is_refused_by_name(tmp_path: Path) -> None:
    old = Path.home() / ".pyenv/versions"
    candidates = sorted(old.glob("3.10*/bin/python3")) + sorted(old.glob("3.9*/bin/python3"))
    if not candidates:
        pytest.skip("no Python older than 3.11 on this machine")
    out = _dev("install", PYKUBELET_VENV=str(tmp_path / "venv"), PYKUBELET_PYTHON=str(candidates[0]))
    assert out.returncode != 0
    assert "older than 3.11" in out.stderr and str(candidates[0].parent.parent) in out.stderr, out.stderr
    assert not (tmp_path / "venv").exists()


def test_a_missing_python_is_named(tmp_path: Path) -> None:
    out = _dev("install", PYKUBELET_VENV=str(tmp_path / "venv"), PYKUBELET_PYTHON="python3.99")
    assert out.returncode != 0 and "no python3.99 on PATH" in out.stderr, out.stderr


def test_down_without_an_install_says_so(tmp_path: Path) -> None:
    out = _dev("down", PYKUBELET_VENV=str(tmp_path / "nothing"))
    assert out.returncode != 0 and str(tmp_path / "nothing") in out.stderr, out.stderr


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_the_lock_file_pins_every_declared_dependency_within_its_floor() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    for spec in declared:
        name = _requirement_name(spec)
        assert name in pins, f"{name} is declared in pyproject.toml but not pinned in constraints.txt"
        floor = re.search(r">=\s*([0-9][0-9.]*)", spec)
        if floor:
            want = tuple(int(p) for p in floor.group(1).split("."))
            have = tuple(int(p) for p in re.findall(r"\d+", pins[name])[: len(want)])
            assert have >= want, f"constraints.txt pins {name}=={pins[name]}, below the floor {spec}"
