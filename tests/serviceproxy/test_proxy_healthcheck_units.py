"""Health check node ports, pure parts: kube-proxy's exact body, which Services get a port, and the
local ready endpoint count per Service (distinct endpoints over its ports, ready ones on this node)."""

from __future__ import annotations

import json

from serviceproxy.healthcheck import body, local_ready_counts, wanted_ports
from serviceproxy.model import merge_endpoints, service_ports


def test_the_body_is_kube_proxys_text() -> None:
    text = body("ns", "web", 2, True)
    assert text == (
        '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "web"\n\t},\n'
        '\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}'
    )
    assert json.loads(body("ns", "web", 0, False)) == {
        "service": {"namespace": "ns", "name": "web"},
        "localEndpoints": 0,
        "serviceProxyHealthy": False,
    }


def _service(policy: str) -> dict:
    return {
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.20",
            "externalTrafficPolicy": policy,
            "healthCheckNodePort": 31000,
            "ports": [
                {"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"},
                {"name": "alt", "port": 81, "nodePort": 30081, "protocol": "TCP"},
            ],
        },
    }


def test_local_ready_endpoints_are_counted_per_service() -> None:
    slice_ = {
        "metadata": {"name": "web-x", "namespace": "ns", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [
            {"name": "http", "port": 8080, "protocol": "TCP"},
            {"name": "alt", "port": 8080, "protocol": "TCP"},
        ],
        "endpoints": [
            {"addresses": ["10.244.0.5"], "conditions": {"ready": True}, "nodeName": "n1"},
            {"addresses": ["10.244.0.6"], "conditions": {"ready": False}, "nodeName": "n1"},
            {"addresses": ["10.244.1.5"], "conditions": {"ready": True}, "nodeName": "n2"},
        ],
    }
    ports = service_ports(_service("Local"))
    assert wanted_ports(ports) == {("ns", "web"): 31000}
    assert local_ready_counts(ports, merge_endpoints([slice_]), "n1") == {("ns", "web"): 1}
    assert local_ready_counts(ports, merge_endpoints([slice_]), "n3") == {("ns", "web"): 0}
    assert wanted_ports(service_ports(_service("Cluster"))) == {}
