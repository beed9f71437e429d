"""The default scheduler's decisions on two or more real nodes, through the API only (skipped on a one-node
cluster; the project's stack of three nodes in two zones runs them, tests/rig/test_multinode_up.py):

- required pod anti-affinity on the hostname: of N+1 replicas on N schedulable nodes, N run, one per node,
  and the last stays Pending with kube-scheduler 1.32's FailedScheduling text;
- topology spread across zones: with maxSkew 1, twice as many replicas as zones land two in every zone
  whatever the zones' node counts; with minDomains above the number of zones, one pod per zone runs and
  the rest stay Pending with the spread message. The zones are the nodes' topology.kubernetes.io/zone when
  every schedulable node has one (the project's stack started with zones, a cloud's cluster), else a zone
  label of this test's own dealt to the nodes and taken off again (kind's nodes have no zones);
- preemption: a pod of a higher PriorityClass that fits nowhere evicts the lower-priority pod holding the
  node's CPU (the victim gets the DisruptionTarget condition and goes), is nominated to that node and runs
  there; with `preemptionPolicy: Never` (its PriorityClass's) the same pod stays Pending and evicts nothing.

The messages count every node of the cluster, so they are compared character for character when every node
is schedulable (on kind, the control-plane node's taint adds a part of its own). kube-scheduler joins each
part with " %v." (FitError.Error in pkg/scheduler/framework/types.go) and the preemption part already ends
with a period, hence the "..".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.twonodes import kubectl, on_nodes
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration
ZONE = "topology.kubernetes.io/zone"


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


def _settled(kube: client.CoreV1Api, namespace: str, app: str, running: int, pending: int) -> tuple:
    """Wait until `running` pods of the app run and `pending` are unschedulable: (the running pods, the
    Pending pods' messages)."""

    def check() -> tuple[list[client.V1Pod], list[str]] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        up = [p for p in pods if p.status.phase == "Running"]
        waiting = [m for p in pods if (m := _unschedulable(p)) is not None]
        return (up, waiting) if len(up) == running and len(waiting) == pending else None

    return wait_for(check, timeout=120, what=f"{running} {app} pods Running and {pending} Pending")


def _split(kube: client.CoreV1Api, namespace: str, app: str, running: int, pending: int) -> str:
    """As _settled, each running pod on a node of its own; the Pending message."""
    up, waiting = _settled(kube, namespace, app, running, pending)
    assert len({p.spec.node_name for p in up}) == running, [p.spec.node_name for p in up]
    return waiting[0]


def _every_node_schedulable(kube: client.CoreV1Api, schedulable: list[str]) -> bool:
    """Whether the message's node count is the schedulable nodes' (no tainted control plane beside them)."""
    return len(kube.list_node().items) == len(schedulable)


def _no_victims(n: int) -> str:
    return f"preemption: 0/{n} nodes are available: {n} No preemption victims found for incoming pod.."


def test_required_anti_affinity_runs_one_replica_per_node_and_says_why_the_last_waits(
    api_client, kube, namespace, image, schedulable_nodes
) -> None:  # type: ignore[no-untyped-def]
    n = len(schedulable_nodes)
    template = {
        "spec": _pod(
            "x",
            image,
            {},
            affinity={
                **on_nodes(schedulable_nodes),
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
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, _deployment("apart", n + 1, template)
    )
    message = _split(kube, namespace, "apart", running=n, pending=1)
    total = len(kube.list_node().items)
    assert message.startswith(f"0/{total} nodes are available: "), message
    assert f"{n} node(s) didn't match pod anti-affinity rules" in message, message
    if _every_node_schedulable(kube, schedulable_nodes):
        assert message == f"0/{n} nodes are available: {n} node(s) didn't match pod anti-affinity rules. " + (
            _no_victims(n)
        )


@dataclass(frozen=True)
class Zones:
    key: str  # the node label the zones are values of
    of: dict[str, str]  # node -> its zone, for every schedulable node

    @property
    def names(self) -> list[str]:
        return sorted(set(self.of.values()))


@pytest.fixture
def zones(kube, kubeconfig: Path, namespace: str, schedulable_nodes: list[str]) -> Iterator[Zones]:  # type: ignore[no-untyped-def]
    """The cluster's zones when every schedulable node has one; else a zone label of this test's own on
    the nodes (zone-a, zone-b, zone-a, ...), removed afterwards: the test never changes the cluster's own
    topology labels."""
    labels = {node.metadata.name: node.metadata.labels or {} for node in kube.list_node().items}
    own = {node: labels[node].get(ZONE, "") for node in schedulable_nodes}
    if all(own.values()):
        yield Zones(ZONE, own)
        return
    key = f"e2e.pykubelet.io/zone-{namespace}"
    dealt = {node: ("zone-a", "zone-b")[i % 2] for i, node in enumerate(schedulable_nodes)}
    try:
        for node, zone in dealt.items():
            kubectl(kubeconfig, "label", "node", node, f"{key}={zone}", "--overwrite")
        yield Zones(key, dealt)
    finally:
        for node in dealt:
            kubectl(kubeconfig, "label", "node", node, f"{key}-", check=False)


def _spread(image: str, nodes: list[str], key: str, app: str, **constraint: Any) -> dict[str, Any]:
    return {
        "spec": _pod(
            "x",
            image,
            {},
            affinity=on_nodes(nodes),
            topologySpreadConstraints=[
                {
                    "maxSkew": 1,
                    "topologyKey": key,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": app}},
                    **constraint,
                }
            ],
        )["spec"]
    }


def test_spread_with_max_skew_one_puts_as_many_pods_in_every_zone(
    api_client, kube, namespace, image, schedulable_nodes, zones
) -> None:  # type: ignore[no-untyped-def]
    # Two per zone, however many nodes each zone has: a zone of one node takes both on that node.
    replicas = 2 * len(zones.names)
    template = _spread(image, schedulable_nodes, zones.key, "even")
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, _deployment("even", replicas, template)
    )
    up, _ = _settled(kube, namespace, "even", running=replicas, pending=0)
    per_zone = Counter(zones.of[p.spec.node_name] for p in up)
    assert per_zone == dict.fromkeys(zones.names, 2), per_zone


def test_spread_with_more_min_domains_than_zones_holds_one_pod_per_zone(
    api_client, kube, namespace, image, schedulable_nodes, zones
) -> None:  # type: ignore[no-untyped-def]
    count = len(zones.names)
    # Fewer eligible domains than minDomains: the global minimum counts as 0, so each zone may hold at
    # most maxSkew pods.
    template = _spread(image, schedulable_nodes, zones.key, "spread", minDomains=count + 1)
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, _deployment("spread", count + 1, template)
    )
    message = _split(kube, namespace, "spread", running=count, pending=1)
    running = kube.list_namespaced_pod(
        namespace, label_selector="app=spread", field_selector="status.phase=Running"
    )
    assert sorted(zones.of[p.spec.node_name] for p in running.items) == zones.names
    n = len(schedulable_nodes)
    assert f"{n} node(s) didn't match pod topology spread constraints" in message, message
    if _every_node_schedulable(kube, schedulable_nodes):
        assert message == (
            f"0/{n} nodes are available: {n} node(s) didn't match pod topology spread constraints. "
            + _no_victims(n)
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
    kube, namespace, image, two_nodes, schedulable_nodes, priorities
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
    assert "1 Insufficient cpu" in message and message.endswith(
        " preemption: not eligible due to preemptionPolicy=Never.."
    ), message
    if _every_node_schedulable(kube, schedulable_nodes):
        n = len(schedulable_nodes)  # the others fail on the nodeSelector
        assert message == (
            f"0/{n} nodes are available: 1 Insufficient cpu, {n - 1} node(s) didn't match Pod's node "
            "affinity/selector. preemption: not eligible due to preemptionPolicy=Never.."
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
