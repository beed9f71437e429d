"""`pykubelet agent` refuses bad input with a message and exit code 2, before touching anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pykubelet", "agent", *args], capture_output=True, text=True, timeout=60
    )


def test_bad_config_file(tmp_path: Path):
    bad = tmp_path / "kubelet.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n")
    out = run("--config", str(bad))
    assert out.returncode == 2 and "KubeletConfiguration" in out.stderr


def test_missing_kubeconfig(tmp_path: Path):
    out = run("--kubeconfig", str(tmp_path / "absent"), "--node-name", "n1")
    assert out.returncode == 2 and "cannot read kubeconfig" in out.stderr
