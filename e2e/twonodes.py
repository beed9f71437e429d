"""What the scenarios that need two or more schedulable nodes share: the choice of them (the `two_nodes` and
`schedulable_nodes` fixtures skip on a one-node cluster), a node affinity keeping a pod to them, and
kubectl."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client


def kubectl(
    kubeconfig: Path, *args: str, check: bool = True, timeout: float = 240
) -> subprocess.CompletedProcess:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
    return done


def schedulable(node: client.V1Node) -> bool:
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    blocked = any(t.effect in ("NoSchedule", "NoExecute") for t in node.spec.taints or [])
    return ready and not node.spec.unschedulable and not blocked


def pick_two_nodes(kube: client.CoreV1Api, node_name: str) -> list[str]:
    """The `two_nodes` fixture (e2e/conftest.py): this run's node and another schedulable one."""
    names = pick_schedulable_nodes(kube)
    first = node_name if node_name in names else names[0]
    return [first, next(n for n in names if n != first)]


def pick_schedulable_nodes(kube: client.CoreV1Api) -> list[str]:
    """The `schedulable_nodes` fixture (e2e/conftest.py): every schedulable node, by name."""
    names = sorted(n.metadata.name for n in kube.list_node().items if schedulable(n))
    if len(names) < 2:
        pytest.skip(f"needs 2 schedulable nodes, the cluster has {len(names)}")
    return names


def on_nodes(nodes: list[str]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                        ]
                    }
                ]
            }
        }
    }
