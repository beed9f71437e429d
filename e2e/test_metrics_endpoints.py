"""The node's stats and metrics endpoints through the API server's nodes/proxy, as metrics-server and
Prometheus reach them: `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary`, `.../metrics/resource`
and `.../metrics`. Only what upstream's kubelet guarantees is asserted (field names, label sets, a
CPU-limited spinner's usage within its limit), so the scenario passes against a genuine cluster too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

LIMIT_CORES = 0.1


def raw(kubeconfig: Path, path: str) -> str:
    proc = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", path],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"kubectl get --raw {path}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def spinner(node: str, image: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="spin"),
        spec=client.V1PodSpec(
            node_name=node,
            termination_grace_period_seconds=1,
            containers=[
                client.V1Container(
                    name="spin",
                    image=image,
                    command=["sh", "-c", "while :; do :; done"],
                    resources=client.V1ResourceRequirements(limits={"cpu": "100m", "memory": "64Mi"}),
                )
            ],
        ),
    )


def summary_pod(doc: dict[str, Any], namespace: str, name: str) -> dict[str, Any] | None:
    return next(
        (
            p
            for p in doc.get("pods") or []
            if p["podRef"]["namespace"] == namespace and p["podRef"]["name"] == name
        ),
        None,
    )


def test_summary_and_resource_metrics_through_the_node_proxy(kube, kubeconfig, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, spinner(node_name, image))
    wait_for(lambda: kube.read_namespaced_pod("spin", namespace).status.phase == "Running", what="Running")
    uid = kube.read_namespaced_pod("spin", namespace).metadata.uid
    summary_path = f"/api/v1/nodes/{node_name}/proxy/stats/summary"

    def measured() -> dict[str, Any] | None:
        pod = summary_pod(json.loads(raw(kubeconfig, summary_path)), namespace, "spin")
        containers = (pod or {}).get("containers") or []
        usage = containers[0].get("cpu", {}).get("usageNanoCores") if containers else None
        return pod if usage else None

    pod = wait_for(measured, timeout=90, what="the spinner's CPU rate in the Summary")
    assert pod["podRef"] == {"name": "spin", "namespace": namespace, "uid": uid}
    (spin,) = pod["containers"]
    assert spin["name"] == "spin"
    # Throttled at its limit: never much above it, and busy enough to be seen.
    assert 0.2 * LIMIT_CORES * 1e9 < spin["cpu"]["usageNanoCores"] < 1.5 * LIMIT_CORES * 1e9
    assert spin["cpu"]["usageCoreNanoSeconds"] > 0
    assert 0 < spin["memory"]["workingSetBytes"] <= 64 * 2**20
    assert pod["cpu"]["usageCoreNanoSeconds"] >= spin["cpu"]["usageCoreNanoSeconds"]
    assert pod["memory"]["workingSetBytes"] > 0
    assert "rxBytes" in pod["network"] and "txBytes" in pod["network"]
    node = json.loads(raw(kubeconfig, summary_path))["node"]
    assert node["nodeName"] == node_name
    assert node["cpu"]["usageCoreNanoSeconds"] > 0 and node["memory"]["workingSetBytes"] > 0
    assert node["fs"]["capacityBytes"] >= node["fs"]["availableBytes"] > 0

    later = wait_for(
        lambda: (
            (p := summary_pod(json.loads(raw(kubeconfig, summary_path)), namespace, "spin"))
            and p["containers"][0]["cpu"]["usageCoreNanoSeconds"] > spin["cpu"]["usageCoreNanoSeconds"]
            and p
        ),
        what="the spinner's CPU time rising",
    )
    lean = json.loads(raw(kubeconfig, summary_path + "?only_cpu_and_memory=true"))
    lean_pod = summary_pod(lean, namespace, "spin")
    assert lean_pod is not None and "network" not in lean_pod and "volume" not in lean_pod
    assert later["containers"][0]["cpu"]["usageCoreNanoSeconds"] > 0

    text = raw(kubeconfig, f"/api/v1/nodes/{node_name}/proxy/metrics/resource")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {"container": "spin", "pod": "spin", "namespace": namespace}
    cpu = [s for s in families["container_cpu_usage_seconds"].samples if s.labels == labels]
    assert len(cpu) == 1 and cpu[0].value > 0 and cpu[0].timestamp is not None
    mem = [s for s in families["container_memory_working_set_bytes"].samples if s.labels == labels]
    assert len(mem) == 1 and mem[0].value > 0
    pod_cpu = [
        s
        for s in families["pod_cpu_usage_seconds"].samples
        if s.labels == {"pod": "spin", "namespace": namespace}
    ]
    assert len(pod_cpu) == 1 and pod_cpu[0].value >= cpu[0].value * 0.9
    start = [s for s in families["container_start_time_seconds"].samples if s.labels == labels]
    started = (
        kube.read_namespaced_pod("spin", namespace).status.container_statuses[0].state.running.started_at
    )
    assert len(start) == 1 and abs(start[0].value - started.timestamp()) < 30
    assert families["node_cpu_usage_seconds"].samples[0].value > 0
    assert families["node_memory_working_set_bytes"].samples[0].value > 0
    assert [s.value for s in families["resource_scrape_error"].samples] == [0]

    kubelet = {
        f.name: f
        for f in text_string_to_metric_families(raw(kubeconfig, f"/api/v1/nodes/{node_name}/proxy/metrics"))
    }
    assert [s.labels for s in kubelet["kubelet_node_name"].samples] == [{"node": node_name}]
    assert kubelet["kubelet_running_pods"].samples[0].value >= 1
    running = {s.labels["container_state"]: s.value for s in kubelet["kubelet_running_containers"].samples}
    assert running["running"] >= 1
    ops = {s.labels["operation_type"]: s.value for s in kubelet["kubelet_runtime_operations"].samples}
    assert ops["list_podsandbox"] >= 1 and ops["list_containers"] >= 1
    relists = [
        s for s in kubelet["kubelet_pleg_relist_duration_seconds"].samples if s.name.endswith("_count")
    ]
    assert relists[0].value >= 1
    cadvisor = raw(kubeconfig, f"/api/v1/nodes/{node_name}/proxy/metrics/cadvisor")
    series = [
        s
        for f in text_string_to_metric_families(cadvisor)
        if f.name == "container_cpu_usage_seconds"
        for s in f.samples
        if s.labels.get("pod") == "spin" and s.labels.get("namespace") == namespace
    ]
    spin_series = [s for s in series if s.labels.get("container") == "spin"]
    assert len(spin_series) == 1 and spin_series[0].value > 0 and spin_series[0].labels["id"]
