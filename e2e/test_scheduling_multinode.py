"""The default scheduler's decisions on two real nodes, through the API only (skipped on a one-node cluster;
the project's two-node stack runs them, tests/rig/test_multinode_up.py):

- required pod anti-affinity on the hostname: two replicas of three run, one per node, and the third stays
  Pending with kube-scheduler 1.32's FailedScheduling text;
- topology spread with minDomains above the number of zones (a zone label this test puts on the two nodes
  and takes off again): one pod per zone, the rest Pending with the spread message;
- preemption: a pod of a higher PriorityClass that fits nowhere evicts the lower-priority pod holding the
  node's CPU (the victim gets the DisruptionTarget condition and goes), is nominated to that node and runs
  there; with `preemptionPolicy: Never` (its PriorityClass's) the same pod stays Pending and evicts nothing.

The messages are compared character for character when the cluster has exactly the two nodes (they count
every node of the cluster). kube-scheduler joins each part with " %v." (FitError.Error in
pkg/scheduler/framework/types.go) and the preemption part already ends with a period, hence the "..".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.twonodes import kubectl, on_nodes
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def _pod(name: str, image: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", "exec sleep 3600"]}],
            **spec,
        },
    }


def _deployment(name: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    template = {**template, "metadata": {"labels": {"app": name}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def _unschedulable(pod: client.V1Pod) -> str | None:
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            return str(cond.message)
    return None


def _split(kube: client.CoreV1Api, namespace: str, app: str, running: int, pending: int) -> str:
    """Wait until `running` pods of the app run and `pending` are unschedulable; the Pending message."""

    def check() -> tuple[list[client.V1Pod], list[str]] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        up = [p for p in pods if p.status.phase == "Running"]
        waiting = [m for p in pods if (m := _unschedulable(p)) is not None]
        return (up, waiting) if len(up) == running and len(waiting) == pending else None

    up, waiting = wait_for(check, timeout=120, what=f"{running} {app} pods Running and {pending} Pending")
    assert len({p.spec.node_name for p in up}) == running, [p.spec.node_name for p in up]
    return waiting[0]


def _node_count(kube: client.CoreV1Api) -> int:
    return len(kube.list_node().items)


def test_required_anti_affinity_runs_one_replica_per_node_and_says_why_the_third_waits(
    api_client, kube, namespace, image, two_nodes
) -> None:  # type: ignore[no-untyped-def]
    template = {
        "spec": _pod(
            "x",
            image,
            {},
            affinity={
                **on_nodes(two_nodes),
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {"matchLabels": {"app": "apart"}},
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                },
            },
        )["spec"]
    }
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, _deployment("apart", 3, template))
    message = _split(kube, namespace, "apart", running=2, pending=1)
    n = _node_count(kube)
    assert message.startswith(f"0/{n} nodes are available: "), message
    assert "2 node(s) didn't match pod anti-affinity rules" in message, message
    if n == 2:
        assert message == (
            "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
        )


@pytest.fixture
def zones(kubeconfig: Path, namespace: str, two_nodes: list[str]) -> Iterator[str]:
    """A zone label of this test's own on the two nodes (zone-a, zone-b), removed afterwards: the test
    never changes the cluster's own topology labels."""
    key = f"e2e.pykubelet.io/zone-{namespace}"
    try:
        for node, zone in zip(two_nodes, ("zone-a", "zone-b"), strict=True):
            kubectl(kubeconfig, "label", "node", node, f"{key}={zone}", "--overwrite")
        yield key
    finally:
        for node in two_nodes:
            kubectl(kubeconfig, "label", "node", node, f"{key}-", check=False)


def test_spread_with_more_min_domains_than_zones_holds_one_pod_per_zone(
    api_client, kube, namespace, image, two_nodes, zones
) -> None:  # type: ignore[no-untyped-def]
    template = {
        "spec": _pod(
            "x",
            image,
            {},
            affinity=on_nodes(two_nodes),
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": zones,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "spread"}},
                    # Fewer eligible domains than minDomains: the global minimum counts as 0, so each
                    # zone may hold at most maxSkew pods.
                    "minDomains": 3,
                }
            ],
        )["spec"]
    }
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, _deployment("spread", 3, template))
    message = _split(kube, namespace, "spread", running=2, pending=1)
    running = kube.list_namespaced_pod(
        namespace, label_selector="app=spread", field_selector="status.phase=Running"
    )
    assert sorted(p.spec.node_name for p in running.items) == sorted(two_nodes)
    n = _node_count(kube)
    assert "2 node(s) didn't match pod topology spread constraints" in message, message
    if n == 2:
        assert message == (
            "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints. "
            "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
        )


def _millicores(quantity: str) -> int:
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return int(float(quantity) * 1000)


def _free_cpu(kube: client.CoreV1Api, node: str) -> int:
    """The node's allocatable CPU less what its live pods request (millicores), as the scheduler sees it."""
    allocatable = _millicores(kube.read_node(node).status.allocatable["cpu"])
    pods = kube.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    requested = 0
    for pod in pods:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        for c in pod.spec.containers:
            requests = (c.resources.requests if c.resources else None) or {}
            requested += _millicores(requests["cpu"]) if "cpu" in requests else 0
    return allocatable - requested


@pytest.fixture
def priorities(api_client, namespace: str) -> Iterator[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    """Low, high, and high that never preempts: a pod's preemptionPolicy comes from its class (the
    Priority admission plugin refuses a pod naming another one)."""
    scheduling = client.SchedulingV1Api(api_client)
    names = (f"{namespace}-low", f"{namespace}-high", f"{namespace}-high-never")
    for name, value, policy in zip(
        names, (1000, 2000, 2000), ("PreemptLowerPriority", "PreemptLowerPriority", "Never"), strict=True
    ):
        scheduling.create_priority_class(
            {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy}
        )
    try:
        yield names
    finally:
        for name in names:
            try:
                scheduling.delete_priority_class(name)
            except ApiException as err:
                if err.status != 404:
                    raise


def test_a_higher_priority_pod_preempts_the_lower_one_holding_the_cpu_unless_its_policy_is_never(
    kube, namespace, image, two_nodes, priorities
) -> None:  # type: ignore[no-untyped-def]
    low, high, never = priorities
    node = two_nodes[0]
    share = _free_cpu(kube, node) * 6 // 10
    assert share >= 100, f"{node} has too little free CPU for the test: {share}m"
    requests = {"resources": {"requests": {"cpu": f"{share}m"}}}

    def sized(name: str, priority: str, **spec: Any) -> dict[str, Any]:
        body = _pod(name, image, {"app": name}, nodeSelector={"kubernetes.io/hostname": node}, **spec)
        body["spec"]["priorityClassName"] = priority
        body["spec"]["containers"][0].update(requests)
        return body

    kube.create_namespaced_pod(namespace, sized("victim", low))
    wait_for(
        lambda: kube.read_namespaced_pod("victim", namespace).status.phase == "Running",
        timeout=120,
        what="the low-priority pod Running",
    )

    # preemptionPolicy Never (from its class): it waits for room and evicts nothing.
    kube.create_namespaced_pod(namespace, sized("patient", never))
    message = wait_for(
        lambda: _unschedulable(kube.read_namespaced_pod("patient", namespace)),
        timeout=60,
        what="the Never pod unschedulable",
    )
    n = _node_count(kube)
    assert "1 Insufficient cpu" in message and message.endswith(
        " preemption: not eligible due to preemptionPolicy=Never.."
    ), message
    if n == 2:
        assert message == (
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector. "
            "preemption: not eligible due to preemptionPolicy=Never.."
        )
    patient = kube.read_namespaced_pod("patient", namespace)
    assert not patient.status.nominated_node_name
    victim = kube.read_namespaced_pod("victim", namespace)
    assert victim.metadata.deletion_timestamp is None and victim.status.phase == "Running"
    kube.delete_namespaced_pod("patient", namespace, grace_period_seconds=0)

    # The same pod allowed to preempt: the victim gets DisruptionTarget and goes, the preemptor is
    # nominated to the node and runs there.
    victim_uid = victim.metadata.uid
    kube.create_namespaced_pod(namespace, sized("preemptor", high))
    seen: dict[str, Any] = {}

    def disrupted() -> bool:
        try:
            pod = kube.read_namespaced_pod("victim", namespace)
        except ApiException as err:
            if err.status == 404:
                return "condition" in seen
            raise
        if pod.metadata.uid != victim_uid:
            return "condition" in seen
        for cond in pod.status.conditions or []:
            if cond.type == "DisruptionTarget":
                seen["condition"] = (cond.status, cond.reason, cond.message)
        return False

    wait_for(disrupted, timeout=120, interval=0.1, what="the victim marked DisruptionTarget and gone")
    assert seen["condition"] == (
        "True",
        "PreemptionByScheduler",
        "default-scheduler: preempting to accommodate a higher priority pod",
    )
    preemptor = wait_for(
        lambda: (p := kube.read_namespaced_pod("preemptor", namespace)).status.phase == "Running" and p,
        timeout=120,
        what="the preemptor Running",
    )
    assert preemptor.spec.node_name == node
    events = kube.list_namespaced_event(namespace, field_selector="involvedObject.name=victim").items
    preempted = [e.message for e in events if e.reason == "Preempted"]
    assert preempted == [f"Preempted by pod {preemptor.metadata.uid} on node {node}"], preempted
