"""`pykubelet simulate` run as a user runs it, for the scenarios and tests that put simulated nodes beside
a cluster's own (its output kept for the failure message)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kubernetes import client


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


def node_ready(node: client.V1Node) -> bool:
    """The node's Ready condition is True (a node `kubectl get nodes` shows Ready)."""
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def simulation_leftovers(v1: client.CoreV1Api, prefix: str) -> list[str]:
    """The Nodes and node Leases named with a simulation's `--name-prefix`: what it must not leave behind
    once stopped."""
    nodes = [n.metadata.name for n in v1.list_node().items if n.metadata.name.startswith(prefix)]
    leases = client.CoordinationV1Api(v1.api_client).list_namespaced_lease("kube-node-lease").items
    return nodes + [f"lease {x.metadata.name}" for x in leases if x.metadata.name.startswith(prefix)]
