"""Resource metrics through the aggregation layer, kubectl top, and the HorizontalPodAutoscaler, through
the API and kubectl only (so they run unchanged against a cluster running upstream's metrics-server).

kubectl top's figures are checked against the containers' own cgroup counters, read with kubectl exec
(cgroup v2's cpu.stat and memory.current, or v1's cpuacct.usage and memory.usage_in_bytes, minus
inactive file pages: the working set).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.waiting import wait_for

CPU_SCRIPT = (
    "if [ -f /sys/fs/cgroup/cpu.stat ]; then awk '/^usage_usec/ {printf \"%d\\n\", $2*1000}' /sys/fs/cgroup/cpu.stat;"
    " else cat /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null || cat /sys/fs/cgroup/cpu,cpuacct/cpuacct.usage; fi"
)
MEM_SCRIPT = (
    "if [ -f /sys/fs/cgroup/memory.current ]; then u=$(cat /sys/fs/cgroup/memory.current);"
    " i=$(awk '/^inactive_file/ {print $2}' /sys/fs/cgroup/memory.stat);"
    " else u=$(cat /sys/fs/cgroup/memory/memory.usage_in_bytes);"
    " i=$(awk '/^total_inactive_file/ {print $2}' /sys/fs/cgroup/memory/memory.stat); fi; echo $((u-i))"
)


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """kubectl with a discovery cache of its own: the shared ~/.kube/cache may hold a discovery taken
    while the metrics API was not yet (or, after an API server restart, not again) available, and
    kubectl keeps that for hours."""
    with tempfile.TemporaryDirectory(prefix="kubectl-cache-") as cache:
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", cache, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=check,
        )


def millicores(text: str) -> float:
    if text.endswith("n"):
        return int(text[:-1]) / 1e6
    if text.endswith("u"):
        return int(text[:-1]) / 1e3
    if text.endswith("m"):
        return float(text[:-1])
    return float(text) * 1000


def mebibytes(text: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text) / (1024 * 1024)


def burner(name: str, node: str, image: str, cpu_limit: str = "200m") -> dict[str, Any]:
    """A pod whose `burn` container spins (held to its CPU limit) and whose `mem` container holds 24 MiB
    of shared memory it wrote."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "burn",
                    "image": image,
                    "command": ["sh", "-c", "while :; do :; done"],
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": cpu_limit}},
                },
                {
                    "name": "mem",
                    "image": image,
                    "command": ["sh", "-c", "head -c 25165824 /dev/zero > /dev/shm/hold; sleep 3600"],
                    "resources": {"requests": {"cpu": "10m"}},
                },
            ],
        },
    }


def apiservice_available(kubeconfig: Path) -> bool:
    out = kubectl(kubeconfig, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout).get("status", {}).get("conditions") or []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


@pytest.fixture
def metrics_api(kubeconfig: Path) -> Path:
    wait_for(lambda: apiservice_available(kubeconfig), timeout=60, what="v1beta1.metrics.k8s.io Available")
    return kubeconfig


def test_the_metrics_api_is_discovered_and_lists_nodes(metrics_api: Path, node_name: str) -> None:
    groups = json.loads(kubectl(metrics_api, "get", "--raw", "/apis").stdout)["groups"]
    assert "metrics.k8s.io" in [g["name"] for g in groups]
    resources = json.loads(kubectl(metrics_api, "get", "--raw", "/apis/metrics.k8s.io/v1beta1").stdout)
    kinds = {r["name"]: r["kind"] for r in resources["resources"]}
    assert kinds["nodes"] == "NodeMetrics" and kinds["pods"] == "PodMetrics"
    assert "metrics.k8s.io" in kubectl(metrics_api, "api-versions").stdout

    def node_metrics() -> dict[str, Any] | None:
        out = kubectl(
            metrics_api, "get", "--raw", f"/apis/metrics.k8s.io/v1beta1/nodes/{node_name}", check=False
        )
        return json.loads(out.stdout) if out.returncode == 0 else None

    doc = wait_for(node_metrics, timeout=60, interval=2, what=f"NodeMetrics of {node_name}")
    assert doc["kind"] == "NodeMetrics" and doc["metadata"]["name"] == node_name
    assert millicores(doc["usage"]["cpu"]) > 0 and mebibytes(doc["usage"]["memory"]) > 0
    assert doc["window"].endswith("s") and doc["timestamp"].endswith("Z")
    missing = kubectl(
        metrics_api, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/no-such-node", check=False
    )
    assert missing.returncode != 0 and "NotFound" in missing.stderr + missing.stdout


def test_kubectl_top_node(metrics_api: Path, node_name: str) -> None:
    def top() -> list[str] | None:
        out = kubectl(metrics_api, "top", "node", node_name, "--no-headers", check=False)
        return out.stdout.split() if out.returncode == 0 and out.stdout.strip() else None

    name, cpu, cpu_pct, memory, mem_pct = wait_for(top, timeout=60, interval=2, what="kubectl top node")[:5]
    assert name == node_name
    assert cpu.endswith("m") and int(cpu[:-1]) > 0 and cpu_pct.endswith("%")
    assert memory.endswith("Mi") and int(memory[:-2]) > 0 and mem_pct.endswith("%")


def test_kubectl_top_pod_agrees_with_the_cgroup_counters(
    metrics_api: Path, kube: Any, namespace: str, node_name: str, image: str
) -> None:
    kube.create_namespaced_pod(namespace, burner("burner", node_name, image))
    wait_for(
        lambda: kube.read_namespaced_pod("burner", namespace).status.phase == "Running",
        timeout=90,
        what="the burner running",
    )

    def counter(container: str, script: str) -> int:
        out = kubectl(
            metrics_api, "exec", "-n", namespace, "burner", "-c", container, "--", "sh", "-c", script
        )
        return int(out.stdout.strip())

    def top() -> dict[str, tuple[str, str]] | None:
        out = kubectl(
            metrics_api, "top", "pod", "burner", "-n", namespace, "--containers", "--no-headers", check=False
        )
        rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
        found = {r[1]: (r[2], r[3]) for r in rows if len(r) >= 4}
        return found if out.returncode == 0 and set(found) == {"burn", "mem"} else None

    start_ns, start = counter("burn", CPU_SCRIPT), time.monotonic()
    wait_for(top, timeout=90, interval=2, what="kubectl top pod --containers to show both containers")
    time.sleep(max(0.0, 20 - (time.monotonic() - start)))  # a measurement window as long as the scrapes'
    measured = (counter("burn", CPU_SCRIPT) - start_ns) / 1e6 / (time.monotonic() - start)
    shown = top()
    assert shown is not None
    burn_cpu = millicores(shown["burn"][0])
    assert abs(burn_cpu - measured) <= max(50.0, 0.3 * measured), (shown, measured)
    assert 120 <= burn_cpu <= 230, shown  # held to its 200m limit
    working_set = counter("mem", MEM_SCRIPT) / (1024 * 1024)
    mem = mebibytes(shown["mem"][1])
    assert mem >= 20, shown
    assert abs(mem - working_set) <= max(4.0, 0.2 * working_set), (shown, working_set)
    # label selectors reach the metrics API
    selected = kubectl(
        metrics_api, "top", "pod", "-n", namespace, "-l", "app=burner", "--no-headers"
    ).stdout.split()
    assert selected[0] == "burner"
    unmatched = kubectl(metrics_api, "top", "pod", "-n", namespace, "-l", "app=other", check=False)
    assert "burner" not in unmatched.stdout and "No resources found" in unmatched.stdout + unmatched.stderr
    # the pod's line is the sum of its containers
    pod_line = kubectl(metrics_api, "top", "pod", "-n", namespace, "--no-headers").stdout.split()
    assert pod_line[0] == "burner"
    assert abs(millicores(pod_line[1]) - burn_cpu - millicores(shown["mem"][0])) <= 60


def burning_deployment(name: str, image: str, load: str) -> dict[str, Any]:
    """A Deployment whose pods spin while LOAD=1 (held to 150m, requesting 100m) and sleep otherwise."""
    script = 'if [ "$LOAD" = 1 ]; then while :; do :; done; else exec sleep 3600; fi'
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "c",
                            "image": image,
                            "command": ["sh", "-c", script],
                            "env": [{"name": "LOAD", "value": load}],
                            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "150m"}},
                        }
                    ],
                },
            },
        },
    }


def test_hpa_scales_a_busy_deployment_up_and_back_down(
    metrics_api: Path, api_client: Any, namespace: str, image: str
) -> None:
    from kubernetes import client

    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, burning_deployment("burn", image, "1"))
    # kubectl 1.32's autoscale (autoscaling/v1), then a short scale-down window through autoscaling/v2
    kubectl(
        metrics_api,
        "autoscale",
        "deployment",
        "burn",
        "-n",
        namespace,
        "--min",
        "1",
        "--max",
        "3",
        "--cpu-percent",
        "50",
    )
    patch = {"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 15}}}}
    kubectl(metrics_api, "patch", "hpa", "burn", "-n", namespace, "--type", "merge", "-p", json.dumps(patch))
    hpa = json.loads(kubectl(metrics_api, "get", "hpa", "burn", "-n", namespace, "-o", "json").stdout)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["behavior"]["scaleDown"]["policies"] == [
        {"type": "Percent", "value": 100, "periodSeconds": 15}
    ]

    def replicas() -> int:
        return apps.read_namespaced_deployment("burn", namespace).spec.replicas

    wait_for(
        lambda: replicas() == 3, timeout=180, interval=2, what="the HPA to scale burn up to its maximum 3"
    )
    events = json.loads(
        kubectl(
            metrics_api,
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "reason=SuccessfulRescale",
            "-o",
            "json",
        ).stdout
    )["items"]
    messages = [e["message"] for e in events]
    assert any(
        m.startswith("New size: ") and "cpu resource utilization (percentage of request) above target" in m
        for m in messages
    ), messages

    def targets() -> str | None:
        row = kubectl(metrics_api, "get", "hpa", "burn", "-n", namespace, "--no-headers").stdout.split()
        return row if len(row) >= 7 and row[2] == "cpu:" and not row[3].startswith("<unknown>") else None

    row = wait_for(targets, timeout=60, interval=2, what="TARGETS with a current figure")
    assert row[:2] == ["burn", "Deployment/burn"] and row[3].endswith("%/50%")
    assert (row[4], row[5]) == ("1", "3")
    status = json.loads(kubectl(metrics_api, "get", "hpa", "burn", "-n", namespace, "-o", "json").stdout)[
        "status"
    ]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["AbleToScale"]["status"] == "True"
    assert (
        conditions["ScalingActive"]["status"] == "True"
        and conditions["ScalingActive"]["reason"] == "ValidMetricFound"
    )
    assert conditions["ScalingLimited"]["status"] in ("True", "False")
    assert status["currentMetrics"][0]["resource"]["current"]["averageUtilization"] > 50
    # the v1 view of the same object
    v1 = json.loads(
        kubectl(
            metrics_api,
            "get",
            "--raw",
            f"/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers/burn",
        ).stdout
    )
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 50 and v1["status"]["desiredReplicas"] >= 1

    # the load stops: the pods are replaced by idle ones, and the HPA goes back down to minReplicas
    env_patch = {
        "spec": {
            "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "LOAD", "value": "0"}]}]}}
        }
    }
    apps.patch_namespaced_deployment("burn", namespace, env_patch)
    wait_for(lambda: replicas() == 1, timeout=300, interval=3, what="the HPA to scale burn back down to 1")
    events = json.loads(
        kubectl(
            metrics_api,
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            "reason=SuccessfulRescale",
            "-o",
            "json",
        ).stdout
    )["items"]
    assert any("reason: All metrics below target" in e["message"] for e in events), [
        e["message"] for e in events
    ]
