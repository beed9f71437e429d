"""The host-path CSI driver (pykubelet.csidriver) started as a process, as the rig and a node run it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class RunningDriver:
    process: subprocess.Popen
    endpoint: str
    registration_dir: Path
    state_dir: Path
    call_log: Path

    def calls(self, method: str) -> list[dict]:
        if not self.call_log.exists():
            return []
        lines = [json.loads(line) for line in self.call_log.read_text().splitlines()]
        return [c["request"] for c in lines if c["method"] == method]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


def mounts_under(root: Path) -> list[str]:
    """The mount points at or below `root` in this process's mount namespace (the host's)."""
    prefix = str(root).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4] for line in f) if p == str(root) or p.startswith(prefix)]


def start_driver(base: Path, *extra: str, node_id: str = "node-a") -> RunningDriver:
    registration = base / "plugins_registry"
    registration.mkdir(parents=True, exist_ok=True)
    endpoint = str(base / "plugins" / "csi.sock")
    driver = RunningDriver(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet.csidriver",
                "--endpoint",
                endpoint,
                "--node-id",
                node_id,
                "--state-dir",
                str(base / "state"),
                "--registration-dir",
                str(registration),
                "--call-log",
                str(base / "calls.jsonl"),
                *extra,
            ]
        ),
        endpoint,
        registration,
        base / "state",
        base / "calls.jsonl",
    )
    deadline = time.monotonic() + 30
    while not (os.path.exists(endpoint) and any(registration.glob("*-reg.sock"))):
        if driver.process.poll() is not None or time.monotonic() > deadline:
            driver.stop()
            raise RuntimeError("the CSI driver did not come up")
        time.sleep(0.05)
    return driver


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a unix socket's path must fit in 108 bytes, pytest's tmp_path may not."""
    path = Path(tempfile.mkdtemp(prefix="csi", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def csi_driver(short_dir: Path) -> Iterator[RunningDriver]:
    driver = start_driver(
        short_dir, "--topology-key", "topology.hostpath.csi.pykubelet.io/node", "--max-volumes", "7"
    )
    yield driver
    driver.stop()
