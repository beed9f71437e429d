"""The shipped systemd units start pykubelet from its own environment (/opt/pykubelet/venv, as the README's
host install makes it), with flags our CLI accepts."""

from __future__ import annotations

import argparse
import configparser
import importlib
import shlex
from pathlib import Path

import pytest

from pykubelet.cli import SUBCOMMANDS
from pykubelet.hostenv import DEFAULT_VENV

UNITS = sorted((Path(__file__).resolve().parents[1] / "systemd").glob("*.service"))


def _exec_start(unit: Path) -> list[str]:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # keys are case-sensitive in systemd
    parser.read(unit)
    return shlex.split(parser["Service"]["ExecStart"])


def test_units_exist() -> None:
    assert {u.name for u in UNITS} == {
        "pykubelet.service",
        "pykube-controlplane.service",
        "pykube-proxy.service",
        "pykube-metrics-server.service",
    }


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_exec_start_parses_with_our_cli(unit: Path) -> None:
    argv = _exec_start(unit)
    assert argv[0] == str(DEFAULT_VENV / "bin" / "pykubelet")
    command, args = argv[1], argv[2:]
    assert command in SUBCOMMANDS
    module = importlib.import_module(SUBCOMMANDS[command][0])
    parser = argparse.ArgumentParser(exit_on_error=False)
    module.add_arguments(parser)
    parsed = parser.parse_args(args)  # raises on an unknown or malformed flag
    assert parsed is not None
