"""type LoadBalancer through the API and from pods: the Service gets an ingress IP in its status
(`kubectl get svc` shows it as EXTERNAL-IP), traffic to that IP on the Service's port reaches a backend
(from the test process and from a pod), and loadBalancerSourceRanges admits only the listed sources
(upstream's e2e checks it from two pods, one inside the range and one outside)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from e2e.test_services import backend, pod_ip, slice_endpoints
from e2e.test_services_paths import http_get
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration


def lb_service(kube: Any, namespace: str, port: int, **spec: Any) -> Any:
    """A LoadBalancer Service `web` on `port`: each test its own, since the ingress IP is the node's and a
    Service of an earlier test lingers while its namespace goes (upstream's 5 s before content deletion):
    two on one port would answer for each other."""
    return kube.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": port, "targetPort": "http"}],
                **spec,
            },
        },
    )


def ingress_ip(kube: Any, namespace: str) -> str | None:
    lb = kube.read_namespaced_service_status("web", namespace).status.load_balancer
    return next((i.ip for i in (lb.ingress or []) if i.ip), None) if lb else None


def test_a_load_balancer_gets_an_ingress_ip_and_serves_through_it(
    kube, api_client, namespace, node_name, image, kubeconfig
):
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    svc = lb_service(kube, namespace, 8081)
    assert svc.spec.allocate_load_balancer_node_ports is True and svc.spec.ports[0].node_port
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="backend ready")
    address = wait_for(lambda: ingress_ip(kube, namespace), timeout=60, what="an ingress IP in the status")
    listed = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace, "get", "svc", "web", "--no-headers"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    assert listed[1] == "LoadBalancer" and address in listed[3].split(","), listed
    answer = wait_for(lambda: http_get(f"http://{address}:8081/"), timeout=30, what=f"{address}:8081")
    assert answer == "web-a"


def test_allocate_load_balancer_node_ports_false_leaves_the_ports_without_node_ports(kube, namespace):
    svc = lb_service(kube, namespace, 8083, allocateLoadBalancerNodePorts=False)
    assert svc.spec.allocate_load_balancer_node_ports is False
    assert all(p.node_port is None for p in svc.spec.ports), svc.spec.ports


def prober(name: str, node: str, image: str, target: str) -> dict[str, Any]:
    """A pod fetching `target` once a second forever, logging OK or FAIL per try."""
    script = (
        f"while true; do if timeout 3 wget -q -O /dev/null http://{target}/; then echo OK; "
        "else echo FAIL; fi; sleep 1; done"
    )
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script]}],
        },
    }


def test_source_ranges_admit_only_the_listed_sources(kube, api_client, namespace, node_name, image):
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    # The probers need the ingress IP, so the Service comes first, open to one address that no pod has.
    lb_service(kube, namespace, 8082, loadBalancerSourceRanges=["192.0.2.1/32"])
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="backend ready")
    address = wait_for(lambda: ingress_ip(kube, namespace), timeout=60, what="an ingress IP in the status")
    for name in ("allowed", "denied"):
        kube.create_namespaced_pod(namespace, prober(name, node_name, image, f"{address}:8082"))
    allowed = pod_ip(kube, namespace, "allowed")
    pod_ip(kube, namespace, "denied")
    kube.patch_namespaced_service("web", namespace, {"spec": {"loadBalancerSourceRanges": [f"{allowed}/32"]}})

    def log(name: str) -> list[str]:
        return kube.read_namespaced_pod_log(name, namespace).split()

    wait_for(lambda: "OK" in log("allowed"), timeout=60, what="the allowed pod served")
    seen = len(log("denied"))
    wait_for(lambda: len(log("denied")) >= seen + 4, timeout=60, what="four more tries of the denied pod")
    assert "OK" not in log("denied")[seen:], log("denied")
    assert "OK" not in log("denied"), log("denied")  # never let in, not even before the change


def health_check(address: str, port: int) -> tuple[int, dict[str, Any]] | None:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}:{port}/healthz", timeout=3) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except OSError:
        return None


def test_a_local_load_balancer_health_check_port_counts_this_nodes_endpoints(
    kube, api_client, namespace, node_name, image
):
    from e2e.test_services_paths import node_internal_ip

    svc = lb_service(kube, namespace, 8084, externalTrafficPolicy="Local")
    port = svc.spec.health_check_node_port
    assert port and 30000 <= port <= 32767, svc.spec
    address = node_internal_ip(kube, node_name)
    answer = wait_for(lambda: health_check(address, port), timeout=30, what="the health check port")
    assert answer == (
        503,
        {
            "service": {"namespace": namespace, "name": "web"},
            "localEndpoints": 0,
            "serviceProxyHealthy": True,
        },
    ), answer
    kube.create_namespaced_pod(namespace, backend("web-a", node_name, image))
    ip = pod_ip(kube, namespace, "web-a")
    wait_for(lambda: slice_endpoints(api_client, namespace) == {ip: True}, timeout=60, what="backend ready")
    answer = wait_for(
        lambda: (lambda got: got if got and got[0] == 200 else None)(health_check(address, port)),
        timeout=30,
        what="200 once the node has a ready endpoint",
    )
    assert answer[1]["localEndpoints"] == 1, answer
