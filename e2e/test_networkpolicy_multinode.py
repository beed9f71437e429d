"""NetworkPolicy between pods on two nodes (skipped on a one-node cluster; the project's two-node stack runs
it, tests/rig/test_multinode_up.py): ingress is enforced on the server's node and egress on the client's,
so a probe matrix of clients on the server's node and on the other one shows both nodes' rules at work, as
upstream's netpol e2e probes its pods wherever they were scheduled."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from e2e.test_networkpolicy import Probe, idle, server
from e2e.test_services import pod_ip
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def test_ingress_on_the_servers_node_and_egress_on_the_clients_node(
    kube, api_client, namespace, image, kubeconfig, two_nodes
) -> None:  # type: ignore[no-untyped-def]
    near, far = two_nodes[1], two_nodes[0]  # the server's node, the other one
    net = client.NetworkingV1Api(api_client)
    probe = Probe(kubeconfig)
    kube.create_namespaced_pod(namespace, server("web", near, image))
    pods = {"client": (far, "client"), "stranger": (far, "other"), "neighbour": (near, "other")}
    for name, (node, role) in pods.items():
        kube.create_namespaced_pod(namespace, idle(name, node, image, role))
    web = pod_ip(kube, namespace, "web")
    for name in pods:
        wait_for(lambda name=name: probe(namespace, name, web), timeout=90, what=f"{name} reaching web")

    def policy(name: str, spec: dict[str, Any]) -> None:
        net.create_namespaced_network_policy(namespace, {"metadata": {"name": name}, "spec": spec})

    def expect(want: dict[tuple[str, int], bool]) -> None:
        def holds() -> bool:
            return all(probe(namespace, pod, web, port) == ok for (pod, port), ok in want.items())

        wait_for(holds, timeout=30, interval=0.5, what=f"reachability {want}")

    web_pods = {"matchLabels": {"app": "web"}}
    policy("deny-web", {"podSelector": web_pods, "policyTypes": ["Ingress"]})
    expect({("client", 8080): False, ("stranger", 8080): False, ("neighbour", 8080): False})

    clients = {"matchLabels": {"role": "client"}}
    policy("from-clients", {"podSelector": web_pods, "ingress": [{"from": [{"podSelector": clients}]}]})
    expect(
        {
            ("client", 8080): True,
            ("client", 8081): True,
            ("stranger", 8080): False,
            ("neighbour", 8080): False,
        }
    )

    # Egress, on the client's node: nothing out, then only web's port 8080.
    policy("client-out", {"podSelector": clients, "policyTypes": ["Egress"]})
    expect({("client", 8080): False, ("client", 8081): False})
    to_web = {"to": [{"podSelector": web_pods}], "ports": [{"protocol": "TCP", "port": 8080}]}
    policy("client-to-web", {"podSelector": clients, "policyTypes": ["Egress"], "egress": [to_web]})
    expect({("client", 8080): True, ("client", 8081): False, ("stranger", 8080): False})

    net.delete_collection_namespaced_network_policy(namespace)
    expect({("client", 8081): True, ("stranger", 8080): True, ("neighbour", 8080): True})
