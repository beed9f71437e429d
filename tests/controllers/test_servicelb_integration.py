"""The service-lb-controller against the real API server, on its own identity (kube-system/
service-controller, RBAC on): a LoadBalancer Service gets its Ready nodes' InternalIPs as ingress
(ipMode VIP) and follows nodes going NotReady, being excluded or coming back; a Service with another
loadBalancerClass is left alone; one that stops being a LoadBalancer loses its ingress. Also the API
server's part of type LoadBalancer: allocateLoadBalancerNodePorts false, the health check node port of
a Local one, and upstream's errors for bad source ranges."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import node_status

EXCLUDE = "node.kubernetes.io/exclude-from-external-load-balancers"
NODES = {"lb-n1": "192.0.2.11", "lb-n2": "192.0.2.12"}


def set_node(v1: client.CoreV1Api, name: str, ready: str = "True") -> None:
    status = node_status(ready)
    status["addresses"] = [
        {"type": "InternalIP", "address": NODES[name]},
        {"type": "Hostname", "address": name},
    ]
    v1.patch_node_status(name, {"status": status})


@pytest.fixture(scope="module")
def nodes(v1: client.CoreV1Api) -> Iterator[dict[str, str]]:
    for name in NODES:
        v1.create_node({"metadata": {"name": name}})
        set_node(v1, name)
    yield NODES
    for name in NODES:
        with contextlib.suppress(ApiException):
            v1.delete_node(name)


def lb_service(v1: client.CoreV1Api, ns: str, name: str = "web", **spec: Any) -> client.V1Service:
    body = {
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": "web"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            **spec,
        },
    }
    return v1.create_namespaced_service(ns, body)


def raw_ingress(v1: client.CoreV1Api, ns: str, name: str = "web") -> list[dict[str, Any]]:
    """status.loadBalancer.ingress as the server sends it (the client may not model ipMode)."""
    resp = v1.read_namespaced_service_status(name, ns, _preload_content=False)
    return ((json.loads(resp.data).get("status") or {}).get("loadBalancer") or {}).get("ingress") or []


def vip(*ips: str) -> list[dict[str, str]]:
    return [{"ip": ip, "ipMode": "VIP"} for ip in ips]


async def test_a_load_balancer_gets_its_ready_nodes_as_ingress(apiserver, v1, namespace, nodes):
    lb_service(v1, namespace)
    lb_service(v1, namespace, "other", loadBalancerClass="example.com/other-lb")
    async with running(apiserver, "service-lb-controller"):
        both = vip("192.0.2.11", "192.0.2.12")
        await eventually(lambda: raw_ingress(v1, namespace) == both, what="both nodes as ingress")
        await eventually(
            lambda: (
                {"EnsuringLoadBalancer", "EnsuredLoadBalancer"}
                <= {e.reason for e in v1.list_namespaced_event(namespace).items}
            ),
            what="upstream's service controller events",
        )
        set_node(v1, "lb-n2", ready="False")
        await eventually(lambda: raw_ingress(v1, namespace) == vip("192.0.2.11"), what="NotReady lb-n2 gone")
        v1.patch_node("lb-n1", {"metadata": {"labels": {EXCLUDE: ""}}})
        set_node(v1, "lb-n2")
        await eventually(lambda: raw_ingress(v1, namespace) == vip("192.0.2.12"), what="excluded lb-n1 gone")
        v1.patch_node("lb-n1", {"metadata": {"labels": {EXCLUDE: None}}})
        await eventually(lambda: raw_ingress(v1, namespace) == both, what="lb-n1 back")
        # another implementation's Service: never touched
        assert raw_ingress(v1, namespace, "other") == []
        v1.patch_namespaced_service("web", namespace, {"spec": {"type": "ClusterIP"}})
        await eventually(lambda: raw_ingress(v1, namespace) == [], what="the ingress cleared")
    svc = v1.read_namespaced_service("web", namespace)
    assert svc.spec.type == "ClusterIP"


def test_allocate_load_balancer_node_ports_false_allocates_none(v1, namespace):
    svc = lb_service(v1, namespace, "no-ports", allocateLoadBalancerNodePorts=False)
    assert svc.spec.allocate_load_balancer_node_ports is False
    assert svc.spec.ports[0].node_port is None
    svc = lb_service(v1, namespace, "ports")
    assert svc.spec.allocate_load_balancer_node_ports is True
    assert 30000 <= svc.spec.ports[0].node_port <= 32767


def test_a_local_load_balancer_gets_a_health_check_node_port_that_updates_keep(v1, namespace):
    svc = lb_service(v1, namespace, "local", externalTrafficPolicy="Local")
    port = svc.spec.health_check_node_port
    assert 30000 <= port <= 32767 and port != svc.spec.ports[0].node_port
    body = v1.read_namespaced_service("local", namespace).to_dict()
    replaced = v1.replace_namespaced_service(
        "local",
        namespace,
        {
            "metadata": {"name": "local", "resourceVersion": body["metadata"]["resource_version"]},
            "spec": {
                "type": "LoadBalancer",
                "externalTrafficPolicy": "Local",
                "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
    )
    assert replaced.spec.health_check_node_port == port


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        (
            {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/8", "not-a-cidr"]},
            "spec.loadBalancerSourceRanges[1]",
            "must be a list of IP ranges",
        ),
        (
            {"type": "ClusterIP", "loadBalancerSourceRanges": ["10.0.0.0/8"]},
            "spec.loadBalancerSourceRanges",
            "may only be used when `type` is 'LoadBalancer'",
        ),
        (
            {"type": "NodePort", "allocateLoadBalancerNodePorts": False},
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ),
    ],
)
def test_bad_load_balancer_fields_get_upstreams_422(v1, namespace, spec, field, text):
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(
            namespace,
            {"metadata": {"name": "bad"}, "spec": {"ports": [{"port": 80}], **spec}},
        )
    assert err.value.status == 422
    body = json.loads(err.value.body)
    causes = body["details"]["causes"]
    assert any(c["field"] == field and text in c["message"] for c in causes), body
