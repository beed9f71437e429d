from __future__ import annotations

import subprocess
import sys

from pykubelet import KUBERNETES_VERSION, __version__


def test_version_command_runs_as_installed() -> None:
    out = subprocess.run(["pykubelet", "version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"pykubelet {__version__} (Kubernetes {KUBERNETES_VERSION} behaviour)"


def test_module_entry_and_short_flag() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pykubelet", "version", "--short"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == __version__


def test_unknown_command_fails_with_usage() -> None:
    proc = subprocess.run(["pykubelet", "frobnicate"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "usage: pykubelet" in proc.stderr
