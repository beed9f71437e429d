"""NetworkPolicy through the API and from pods, as upstream's netpol e2e probes it: a pod's connection to
an httpd pod works, a default-deny ingress policy blocks it, an allow rule by podSelector re-opens it
for one client and not the other, a namespaceSelector admits a pod of another namespace, an ipBlock
with except and a port rule select precisely, and deleting the policies restores access. The kubelet's
HTTP readiness probe of the isolated pod keeps passing (traffic from the node is allowed)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.probing import probe_pod
from e2e.test_services import pod_ip
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def server(name: str, node: str, image: str) -> dict[str, Any]:
    """httpd on 8080 (port name http) and 8081, Ready by an HTTP probe from the kubelet."""
    serve = "mkdir -p /www && echo ok > /www/index.html && (httpd -f -p 8081 -h /www &) && httpd -f -p 8080 -h /www"
    body = probe_pod(
        name,
        node,
        image,
        serve,
        grace=1,
        ports=[{"name": "http", "containerPort": 8080}, {"name": "alt", "containerPort": 8081}],
        readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "failureThreshold": 1},
    )
    body["metadata"]["labels"] = {"app": "web"}
    return body


def idle(name: str, node: str, image: str, role: str) -> dict[str, Any]:
    body = probe_pod(name, node, image, "sleep 3600", grace=1)
    body["metadata"]["labels"] = {"role": role}
    return body


def ready_time(kube: Any, namespace: str, name: str) -> Any:
    """When the pod last became Ready (None while it is not)."""
    conditions = kube.read_namespaced_pod(name, namespace).status.conditions or []
    ready = next((c for c in conditions if c.type == "Ready"), None)
    return ready.last_transition_time if ready is not None and ready.status == "True" else None


class Probe:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, namespace: str, pod: str, ip: str, port: int = 8080) -> bool:
        """Whether `pod` gets the page from ip:port within 2 s (`timeout`: busybox 1.35's `wget -T` crashes)."""
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), "-n", namespace, "exec", pod, "--"]
            + ["sh", "-c", f"timeout 2 wget -q -O - http://{ip}:{port}/"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return done.returncode == 0 and done.stdout.strip() == "ok"


@pytest.fixture
def other_namespace(kube) -> Iterator[str]:
    name = f"e2e-np-{uuid.uuid4().hex[:6]}"
    kube.create_namespace({"metadata": {"name": name, "labels": {"np-e2e": name}}})
    wait_for(lambda: kube.list_namespaced_service_account(name).items, timeout=30, what="its ServiceAccount")
    yield name
    kube.delete_namespace(name)


def test_policies_block_and_admit_connections(
    kube, api_client, namespace, other_namespace, node_name, image, kubeconfig
) -> None:
    net = client.NetworkingV1Api(api_client)
    probe = Probe(kubeconfig)
    kube.create_namespaced_pod(namespace, server("web", node_name, image))
    kube.create_namespaced_pod(namespace, idle("client", node_name, image, "client"))
    kube.create_namespaced_pod(namespace, idle("stranger", node_name, image, "other"))
    kube.create_namespaced_pod(other_namespace, idle("visitor", node_name, image, "client"))
    web = pod_ip(kube, namespace, "web")
    client_ip = pod_ip(kube, namespace, "client")
    for ns, pod in ((namespace, "client"), (namespace, "stranger"), (other_namespace, "visitor")):
        wait_for(lambda ns=ns, pod=pod: probe(ns, pod, web), timeout=90, what=f"{pod} reaching web")
    ready_since = wait_for(lambda: ready_time(kube, namespace, "web"), timeout=60, what="web Ready")

    def policy(name: str, **spec: Any) -> None:
        body = {"metadata": {"name": name}, "spec": {"podSelector": {"matchLabels": {"app": "web"}}, **spec}}
        net.create_namespaced_network_policy(namespace, body)

    def expect(want: dict[tuple[str, str, int], bool]) -> None:
        def holds() -> bool:
            return all(probe(ns, pod, web, port) == ok for (ns, pod, port), ok in want.items())

        wait_for(holds, timeout=30, interval=0.5, what=f"reachability {want}")

    here, there = namespace, other_namespace
    policy("deny")
    expect({(here, "client", 8080): False, (here, "stranger", 8080): False, (there, "visitor", 8080): False})

    policy("clients", ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}])
    expect({(here, "client", 8080): True, (here, "stranger", 8080): False, (there, "visitor", 8080): False})

    policy("visitors", ingress=[{"from": [{"namespaceSelector": {"matchLabels": {"np-e2e": there}}}]}])
    expect({(there, "visitor", 8080): True, (here, "stranger", 8080): False})
    net.delete_namespaced_network_policy("clients", namespace)
    net.delete_namespaced_network_policy("visitors", namespace)
    expect({(here, "client", 8080): False})

    block = {"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{client_ip}/32"]}}
    policy("block", ingress=[{"from": [block], "ports": [{"port": "alt"}]}])
    expect({(here, "stranger", 8081): True, (here, "stranger", 8080): False, (here, "client", 8081): False})

    # all along, the kubelet's HTTP readiness probe (from the node) was admitted: Ready never flipped
    assert ready_time(kube, namespace, "web") == ready_since
    net.delete_collection_namespaced_network_policy(namespace)
    expect({(here, "client", 8080): True, (here, "stranger", 8080): True, (there, "visitor", 8080): True})
