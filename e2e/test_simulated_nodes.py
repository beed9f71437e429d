"""`pykubelet simulate` beside the cluster's real node: two simulated nodes join the cluster through the API
alone, a Deployment whose replicas must each have a node of their own (required pod anti-affinity on the
hostname) spreads over the real node and both simulated ones, its Service's EndpointSlice lists all three,
and when the simulation stops its nodes and pods go while the real node's pod runs on untouched.

It needs only an admin kubeconfig and the project installed, so it runs against a genuine cluster too (the
simulated nodes are labelled and removed by the simulation itself when it stops)."""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from e2e.manifests import deployment
from e2e.simulator import Simulator, node_ready
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

SIMULATED_POD_RANGE = ipaddress.ip_network("100.64.0.0/10")  # nodesim's pod addresses (its README)


@pytest.fixture
def simulation(kube, kubeconfig: Path, tmp_path: Path) -> Iterator[tuple[Simulator, list[str]]]:  # type: ignore[no-untyped-def]
    """Two simulated nodes, Ready; stopped at the end if the test has not stopped them itself."""
    prefix = f"e2e-sim-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}0", f"{prefix}1"]
    sim = Simulator(kubeconfig, tmp_path / "simulate.log", "--nodes=2", f"--name-prefix={prefix}")
    try:

        def joined() -> bool:
            nodes = {n.metadata.name: n for n in kube.list_node().items}
            return all(name in nodes and node_ready(nodes[name]) for name in names)

        wait_for(joined, timeout=60, what="the simulated nodes Ready")
        yield sim, names
    finally:
        if sim.proc.poll() is None:
            sim.stop()


def _ready_pods(kube: client.CoreV1Api, namespace: str) -> dict[str, client.V1Pod]:
    pods = kube.list_namespaced_pod(namespace, label_selector="app=mixed").items
    return {
        p.spec.node_name: p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and p.status.pod_ip
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    }


def test_a_deployment_spreads_over_the_real_node_and_simulated_ones_until_the_simulation_stops(
    api_client, kube, namespace, image, node_name, simulation
) -> None:  # type: ignore[no-untyped-def]
    sim, simulated = simulation
    hosts = [node_name, *simulated]
    serve = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
    body = deployment(
        "mixed",
        [
            {
                "name": "web",
                "image": image,
                "command": ["sh", "-c", serve],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
            }
        ],
        replicas=3,
    )
    on_hosts = {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}
    body["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [on_hosts]}]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "mixed"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        },
    }
    client.AppsV1Api(api_client).create_namespaced_deployment(namespace, body)
    service = {"selector": {"app": "mixed"}, "ports": [{"port": 80, "targetPort": 8080}]}
    kube.create_namespaced_service(namespace, {"metadata": {"name": "mixed"}, "spec": service})

    by_node = wait_for(
        lambda: (ready := _ready_pods(kube, namespace)) and sorted(ready) == sorted(hosts) and ready,
        timeout=120,
        what="a Ready replica on the real node and on each simulated one",
    )
    real = by_node[node_name]
    assert ipaddress.ip_address(real.status.pod_ip) not in SIMULATED_POD_RANGE, real.status.pod_ip
    for name in simulated:
        assert ipaddress.ip_address(by_node[name].status.pod_ip) in SIMULATED_POD_RANGE, by_node[name].status

    discovery = client.DiscoveryV1Api(api_client)

    def endpoints() -> dict[str, str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=mixed"
        ).items
        ready = {
            e.node_name: e.addresses[0]
            for s in slices
            for e in s.endpoints or []
            if e.conditions is not None and e.conditions.ready
        }
        return ready if sorted(ready) == sorted(hosts) else None

    listed = wait_for(endpoints, timeout=60, what="the Service's slice listing the three replicas")
    assert listed == {n: p.status.pod_ip for n, p in by_node.items()}

    # SIGTERM: the simulation removes its pods and nodes. The replacements have nowhere to go (the real
    # node holds a replica already), and the real node's pod runs on as it was.
    assert sim.stop() == 0, sim.output()
    names = {n.metadata.name for n in kube.list_node().items}
    assert not names & set(simulated), names
    gone = {by_node[n].metadata.uid for n in simulated}

    def replaced() -> list[client.V1Pod] | None:
        pods = kube.list_namespaced_pod(namespace, label_selector="app=mixed").items
        if any(p.metadata.uid in gone for p in pods):
            return None
        pending = [p for p in pods if p.status.phase == "Pending" and not p.spec.node_name]
        return pending if len(pending) == 2 else None

    wait_for(replaced, timeout=60, what="the simulated pods gone and their two replacements Pending")
    now = kube.read_namespaced_pod(real.metadata.name, namespace)
    assert now.metadata.uid == real.metadata.uid and now.status.phase == "Running"
    assert now.status.container_statuses[0].restart_count == real.status.container_statuses[0].restart_count
    wait_for(
        lambda: _ready_addresses(discovery, namespace) == [listed[node_name]],
        timeout=60,
        what="the Service's slice down to the real node's replica",
    )


def _ready_addresses(discovery: client.DiscoveryV1Api, namespace: str) -> list[str]:
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector="kubernetes.io/service-name=mixed"
    )
    return [
        a
        for s in slices.items
        for e in s.endpoints or []
        if e.conditions is not None and e.conditions.ready
        for a in e.addresses
    ]
