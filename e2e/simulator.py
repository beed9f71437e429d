"""`pykubelet simulate` run as a user runs it, for the scenarios and tests that put simulated nodes beside
a cluster's own (its output kept for the failure message)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class Simulator:
    """`pykubelet simulate` as a user runs it; its output is kept for the failure message."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pykubelet", "simulate", "--kubeconfig", str(kubeconfig), *args],
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def output(self) -> str:
        return self.log.read_text()

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"simulate did not stop on SIGTERM:\n{self.output()}") from None
