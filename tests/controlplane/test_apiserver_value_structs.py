"""The struct fields upstream always serializes, through the real API server: Go's encoding/json writes a
non-pointer struct field even when it is empty (its `omitempty` does nothing), so a minimal object
comes back with `"status":{}`, a Service with `"status":{"loadBalancer":{}}`, a bare Node with its
`daemonEndpoints` and the ten strings of `nodeInfo`. The create's answer, a read, a watch event and a
protobuf answer carry them, and the official Python client reading a bare Node gets a status object."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.rawapi import call
from tests.controlplane.test_apiserver_protobuf import Http

Obj = dict[str, Any]

LABELS = {"app": "v"}
POD_SPEC = {"containers": [{"name": "c", "image": "busybox"}]}
TEMPLATE = {"metadata": {"labels": LABELS}, "spec": POD_SPEC}
NODE_INFO = {
    "machineID": "",
    "systemUUID": "",
    "bootID": "",
    "kernelVersion": "",
    "osImage": "",
    "containerRuntimeVersion": "",
    "kubeletVersion": "",
    "kubeProxyVersion": "",
    "operatingSystem": "",
    "architecture": "",
}
BARE_NODE_STATUS = {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}, "nodeInfo": NODE_INFO}


def at(obj: Any, path: str) -> Any:
    """The value at a dotted path (a number steps into a list); KeyError names what is missing."""
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


# (collection path below the namespace, or "" parts for cluster-scoped; the minimal body; path -> value)
CASES: dict[str, tuple[str, Obj, dict[str, Any]]] = {
    "deployment": (
        "/apis/apps/v1/namespaces/{ns}/deployments",
        {"spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        {"status": {}, "spec.template.spec.containers.0.resources": {}},
    ),
    "statefulset": (
        "/apis/apps/v1/namespaces/{ns}/statefulsets",
        {"spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        {"status.replicas": 0, "spec.template.spec.containers.0.resources": {}},
    ),
    "daemonset": (
        "/apis/apps/v1/namespaces/{ns}/daemonsets",
        {"spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        {
            "status": {
                "currentNumberScheduled": 0,
                "numberMisscheduled": 0,
                "desiredNumberScheduled": 0,
                "numberReady": 0,
            }
        },
    ),
    "replicaset": (
        "/apis/apps/v1/namespaces/{ns}/replicasets",
        {"spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        {"status": {"replicas": 0}},
    ),
    "job": (
        "/apis/batch/v1/namespaces/{ns}/jobs",
        {"spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}}},
        {"status": {}, "spec.template.spec.containers.0.resources": {}},
    ),
    "cronjob": (
        "/apis/batch/v1/namespaces/{ns}/cronjobs",
        {
            "spec": {
                "schedule": "*/5 * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}}},
            }
        },
        {"status": {}, "spec.jobTemplate.spec.template.spec.containers.0.resources": {}},
    ),
    "pod": ("/api/v1/namespaces/{ns}/pods", {"spec": POD_SPEC}, {"spec.containers.0.resources": {}}),
    "service": (
        "/api/v1/namespaces/{ns}/services",
        {"spec": {"ports": [{"port": 80}]}},
        {"status": {"loadBalancer": {}}},
    ),
    "replicationcontroller": (
        "/api/v1/namespaces/{ns}/replicationcontrollers",
        {"spec": {"selector": LABELS, "template": TEMPLATE}},
        {"status": {"replicas": 0}},
    ),
    "lease": ("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {}, {"spec": {}}),
    "networkpolicy": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        {},
        {"spec.podSelector": {}},
    ),
    "ingress": (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses",
        {"spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}},
        {"status": {"loadBalancer": {}}},
    ),
    "endpointslice": (
        "/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        {"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}]},
        {"endpoints.0.conditions": {}},
    ),
    "poddisruptionbudget": (
        "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {"spec": {"maxUnavailable": 1}},
        {"status": {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}},
    ),
    "horizontalpodautoscaler": (
        "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
        {
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "maxReplicas": 2,
            }
        },
        {"status.desiredReplicas": 0},
    ),
    "node": ("/api/v1/nodes", {}, {"status": BARE_NODE_STATUS}),
}


@pytest.fixture(scope="module")
def ns(v1: client.CoreV1Api) -> Iterator[str]:
    name = f"vs-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": name}})
    yield name
    v1.delete_namespace(name)


def _check(obj: Obj, wanted: dict[str, Any], what: str) -> None:
    for path, value in wanted.items():
        assert at(obj, path) == value, f"{what}: {path} in {json.dumps(obj)}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_minimal_object_answers_with_upstreams_always_present_structs(
    api: client.ApiClient, apiserver: ApiServer, ns: str, case: str
) -> None:
    collection, body, wanted = CASES[case]
    collection = collection.format(ns=ns)
    name = f"{case[:20]}-{uuid.uuid4().hex[:6]}"
    listed = call(api, "GET", collection)[1]["metadata"]["resourceVersion"]
    status, created = call(api, "POST", collection, {"metadata": {"name": name, "labels": LABELS}, **body})
    assert status == 201, created
    _check(created, wanted, "the create's answer")
    _check(call(api, "GET", f"{collection}/{name}")[1], wanted, "a read")
    query = f"watch=1&resourceVersion={listed}&fieldSelector=metadata.name%3D{name}&timeoutSeconds=5"
    answer = Http(apiserver).open("GET", f"{collection}?{query}", accept="application/json")
    first = json.loads(answer.readline())
    answer.close()
    assert first["type"] == "ADDED"
    _check(first["object"], wanted, "the watch's ADDED event")
    if case == "node":
        call(api, "DELETE", f"{collection}/{name}")


def test_protobuf_answers_carry_them_too(apiserver: ApiServer, ns: str) -> None:
    conn = Http(apiserver)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "pb"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]},
    }
    status, _, created = conn.call("POST", f"/api/v1/namespaces/{ns}/services", service)
    assert status == 201, created
    assert created["status"] == {"loadBalancer": {}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "pb"},
        "spec": {"selector": {"matchLabels": LABELS}, "template": TEMPLATE},
    }
    status, _, created = conn.call("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert status == 201, created
    status, content_type, read = conn.call("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/pb")
    assert content_type.startswith("application/vnd.kubernetes.protobuf")
    assert read["status"] == {} and read["spec"]["template"]["spec"]["containers"][0]["resources"] == {}


def test_the_python_client_reads_a_bare_node_with_a_status(v1: client.CoreV1Api) -> None:
    name = f"bare-{uuid.uuid4().hex[:6]}"
    v1.create_node({"metadata": {"name": name}})
    try:
        node = v1.read_node(name)
        assert node.status is not None
        assert node.status.node_info.machine_id == "" and node.status.node_info.kubelet_version == ""
        assert node.status.daemon_endpoints.kubelet_endpoint.port == 0
        assert node.status.conditions is None
    finally:
        v1.delete_node(name)
