"""The other ways traffic reaches a Service, through the API and from pods only (so they pass on a
genuine cluster): a NodePort from outside the pod network (the test process connects to the node's
InternalIP), a headless Service answering with its pods' IPs and SRV records for its named port,
sessionAffinity ClientIP keeping one client on one backend, a pod reaching itself through its own
Service (hairpin), and a Deployment scaled 3 -> 0 -> 3 (refused at once with no endpoints, served again
once they are back)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from e2e.test_services import backend, fetch_many, pod_ip, run_client, slice_endpoints, web_service
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def node_internal_ip(kube: Any, node: str) -> str:
    addresses = kube.read_node(node).status.addresses or []
    return next(a.address for a in addresses if a.type == "InternalIP")


def http_get(url: str, timeout: float = 5.0) -> str | None:
    """The body, or None when the connection fails or times out."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read().decode().strip()
    except (OSError, urllib.error.URLError):
        return None


def test_a_node_port_is_reached_from_the_host_at_the_node_address(
    kube, api_client, namespace, node_name, image
):
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    svc = kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            },
        },
    )
    node_port = svc.spec.ports[0].node_port
    assert 30000 <= node_port <= 32767, svc.spec.ports
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="backend ready")
    address = node_internal_ip(kube, node_name)
    # The proxy programs the port within about a second of the change; poll as upstream's e2e does.
    answer = wait_for(
        lambda: http_get(f"http://{address}:{node_port}/"), timeout=30, what=f"{address}:{node_port}"
    )
    assert answer == "web-a"


def test_a_headless_service_resolves_to_its_pods_and_srv_names_the_port(
    kube, api_client, namespace, node_name, image
):
    for name in ("web-a", "web-b"):
        kube.create_namespaced_pod(namespace, backend(name, node_name, image))
    kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "clusterIP": "None",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            },
        },
    )
    ips = {pod_ip(kube, namespace, n) for n in ("web-a", "web-b")}
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {ip: True for ip in ips},
        timeout=60,
        what="both backends ready in the slice",
    )
    fqdn = f"web.{namespace}.svc.cluster.local"
    # DNS follows the slices within a moment; retried until both addresses are in the answer.
    wanted = " ".join(f"-e {ip}" for ip in sorted(ips))
    script = (
        f"for i in $(seq 20); do out=$(nslookup {fqdn} 2>&1); "
        f'[ $(echo "$out" | grep -c {wanted}) -ge 2 ] && break; sleep 0.5; done; '
        f'echo "$out"; echo ---; nslookup -type=srv _http._tcp.{fqdn} 2>&1'
    )
    log = run_client(kube, namespace, node_name, image, script)
    a_part, srv_part = log.split("---", 1)
    for ip in ips:
        assert f"Address: {ip}" in a_part, log
    # One SRV per endpoint: the endpoint's port (8080, not the Service's 80), and the endpoint's name
    # (CoreDNS names a pod without a hostname by its dashed IP) under the Service's name.
    for ip in ips:
        target = f"{ip.replace('.', '-')}.{fqdn}"
        lines = [line for line in srv_part.splitlines() if target in line]
        assert lines and " 8080 " in lines[0], log


def test_client_ip_affinity_keeps_one_client_on_one_backend(kube, api_client, namespace, node_name, image):
    for name in ("web-a", "web-b", "web-c"):
        kube.create_namespaced_pod(namespace, backend(name, node_name, image))
    svc = kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"app": "web"},
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
            },
        },
    )
    assert svc.spec.session_affinity == "ClientIP"
    ips = {pod_ip(kube, namespace, n) for n in ("web-a", "web-b", "web-c")}
    wait_for(
        lambda: slice_endpoints(api_client, namespace) == {ip: True for ip in ips},
        timeout=60,
        what="three backends ready",
    )
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 20))
    answers = log.split()
    assert len(answers) == 20 and "FAILED" not in answers, log
    assert len(set(answers)) == 1, log  # without affinity: one backend 20 times with p = 3 * 3^-20


def test_a_pod_reaches_itself_through_its_service(kube, api_client, namespace, node_name, image):
    # The pod serves, then fetches its own Service by name (hairpin) and prints what answered.
    fetch = (
        "for i in $(seq 40); do out=$(timeout 5 wget -q -O - http://web/) && break; sleep 0.5; done; "
        'echo "hairpin=$out"; sleep 3600'
    )
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image, "touch /tmp/ready; " + fetch))
    web_service(kube, namespace)
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="backend ready")
    log = wait_for(
        lambda: (lambda text: text if "hairpin=" in text else None)(
            kube.read_namespaced_pod_log("web-a", namespace)
        ),
        timeout=60,
        what="the pod's own fetch",
    )
    assert "hairpin=web-a" in log, log


def _deployment(replicas: int, image: str, node: str) -> dict[str, Any]:
    pod = backend("web", node, image)
    pod["spec"].pop("nodeName", None)
    return {
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod["spec"]},
        },
    }


def _ready_count(api_client: Any, namespace: str) -> int:
    return sum(slice_endpoints(api_client, namespace).values())


def test_scaling_to_zero_refuses_at_once_and_back_to_three_serves(
    kube, api_client, namespace, node_name, image
):
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment(3, image, node_name))
    svc = web_service(kube, namespace)
    wait_for(lambda: _ready_count(api_client, namespace) == 3, timeout=90, what="three ready endpoints")
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 6))
    assert len(log.split()) == 6 and "FAILED" not in log, log

    apps.patch_namespaced_deployment_scale(namespace=namespace, name="web", body={"spec": {"replicas": 0}})
    wait_for(lambda: not slice_endpoints(api_client, namespace), timeout=90, what="no endpoints left")
    script = (
        f"for i in $(seq 10); do s=$(date +%s); out=$(timeout 20 wget -q -O - http://{svc.spec.cluster_ip}/ 2>&1); "
        'rc=$?; echo "$out rc=$rc took=$(( $(date +%s) - s ))"; case "$out" in *refused*) break;; esac; '
        "sleep 1; done"
    )
    last = run_client(kube, namespace, node_name, image, script).strip().splitlines()[-1]
    assert "Connection refused" in last and "rc=1" in last, last
    assert int(last.rsplit("took=", 1)[1].split()[0]) <= 2, last

    started = time.monotonic()
    apps.patch_namespaced_deployment_scale(namespace=namespace, name="web", body={"spec": {"replicas": 3}})
    wait_for(lambda: _ready_count(api_client, namespace) == 3, timeout=90, what="three ready again")
    log = run_client(kube, namespace, node_name, image, fetch_many(svc.spec.cluster_ip, 6))
    assert len(log.split()) == 6 and "FAILED" not in log, (log, time.monotonic() - started)
