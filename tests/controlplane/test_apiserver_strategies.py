"""Per-kind rules as kube-apiserver 1.32 applies them, through the real server and the official client:
1.32's annotation-size wording, core Events of any type and their `source` selector, JSON Patch `test`
with strict types, and Services (targetPort defaulting, type changes to and from ExternalName,
deletecollection)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.manifests import open_crd
from pykubelet.rig.apiserver import ApiServer

from .conftest import message
from .test_apiserver_wire import exchange, fetch

pytestmark = pytest.mark.integration


def test_annotation_size_error_uses_132_wording(v1: client.CoreV1Api, namespace: str) -> None:
    big = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="big", annotations={"a": "x" * 262144}))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, big)
    assert message(err) == (
        'ConfigMap "big" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes'
    )


def event(name: str, **fields: object) -> dict:
    return {
        "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "x"},
        "reason": "Tested",
        **fields,
    }


def test_core_events_take_any_type_and_events_v1_does_not(apiserver: ApiServer, namespace: str) -> None:
    core = f"/api/v1/namespaces/{namespace}/events"
    status, body, _ = fetch(apiserver, core, "POST", json.dumps(event("odd", type="Custom")).encode())
    assert status == 201, body
    v1event = {
        "metadata": {"name": "strict"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl",
        "reportingInstance": "i",
        "action": "Test",
        "reason": "Tested",
        "regarding": {"kind": "Pod", "name": "p", "namespace": namespace},
        "type": "Custom",
    }
    status, body, _ = fetch(
        apiserver,
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        "POST",
        json.dumps(v1event).encode(),
    )
    assert status == 422 and 'type: Unsupported value: "Custom"' in json.loads(body)["message"]


def test_core_event_source_selector_falls_back_to_the_reporting_controller(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    written = {
        "metadata": {"name": "from-v1"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl",
        "reportingInstance": "i",
        "action": "Test",
        "reason": "Tested",
        "regarding": {"kind": "Pod", "name": "p", "namespace": namespace},
        "type": "Normal",
    }
    status, body, _ = fetch(
        apiserver,
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        "POST",
        json.dumps(written).encode(),
    )
    assert status == 201, body
    fetch(
        apiserver,
        f"/api/v1/namespaces/{namespace}/events",
        "POST",
        json.dumps(event("with-source", source={"component": "kubelet"})).encode(),
    )
    found = v1.list_namespaced_event(namespace, field_selector="source=example.com/ctl")
    assert [e.metadata.name for e in found.items] == ["from-v1"]
    found = v1.list_namespaced_event(namespace, field_selector="source=kubelet")
    assert [e.metadata.name for e in found.items] == ["with-source"]


def test_json_patch_test_compares_types_strictly(apiserver: ApiServer, namespace: str) -> None:
    made = {"metadata": {"name": "p", "annotations": {"a": "1"}}, "spec": {"replicas": 1}}
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    deployment = {
        **made,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "p"}},
            "template": {
                "metadata": {"labels": {"app": "p"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    assert fetch(apiserver, path, "POST", json.dumps(deployment).encode())[0] == 201
    for wrong in (True, 1.0, "1"):
        patch = [
            {"op": "test", "path": "/spec/replicas", "value": wrong},
            {"op": "replace", "path": "/spec/replicas", "value": 2},
        ]
        status, body, _ = fetch(
            apiserver, f"{path}/p", "PATCH", json.dumps(patch).encode(), "application/json-patch+json"
        )
        assert status == 422, (wrong, body)
        assert json.loads(body)["reason"] == "Invalid"
    patch = [
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 2},
    ]
    status, body, _ = fetch(
        apiserver, f"{path}/p", "PATCH", json.dumps(patch).encode(), "application/json-patch+json"
    )
    assert status == 200 and json.loads(body)["spec"]["replicas"] == 2


def service(name: str, **spec: object) -> dict:
    return {"metadata": {"name": name}, "spec": spec}


def test_service_target_port_zero_or_absent_defaults_to_the_port(
    apiserver: ApiServer, namespace: str
) -> None:
    ports = [
        {"name": "zero", "port": 80, "targetPort": 0},
        {"name": "empty", "port": 81, "targetPort": ""},
        {"name": "absent", "port": 82},
        {"name": "named", "port": 83, "targetPort": "http"},
    ]
    status, body, _ = fetch(
        apiserver,
        f"/api/v1/namespaces/{namespace}/services",
        "POST",
        json.dumps(service("s", ports=ports)).encode(),
    )
    assert status == 201, body
    assert [p["targetPort"] for p in json.loads(body)["spec"]["ports"]] == [80, 81, 82, "http"]


def test_service_type_changes_allocate_and_release(v1: client.CoreV1Api, namespace: str) -> None:
    external = client.V1Service(
        metadata=client.V1ObjectMeta(name="flip"),
        spec=client.V1ServiceSpec(
            type="ExternalName", external_name="example.com", ports=[client.V1ServicePort(port=80)]
        ),
    )
    made = v1.create_namespaced_service(namespace, external)
    assert made.spec.cluster_ip is None
    node_port = v1.patch_namespaced_service(
        "flip", namespace, {"spec": {"type": "NodePort", "externalName": None}}
    )
    assert node_port.spec.cluster_ip and node_port.spec.cluster_ips == [node_port.spec.cluster_ip]
    assert node_port.spec.ports[0].node_port and 30000 <= node_port.spec.ports[0].node_port <= 32767
    back = v1.patch_namespaced_service(
        "flip", namespace, {"spec": {"type": "ExternalName", "externalName": "example.org"}}
    )
    assert back.spec.cluster_ip is None and back.spec.cluster_ips is None
    assert back.spec.ports[0].node_port is None
    cluster_ip = v1.patch_namespaced_service(
        "flip", namespace, {"spec": {"type": "ClusterIP", "externalName": None}}
    )
    assert cluster_ip.spec.cluster_ip and cluster_ip.spec.cluster_ips == [cluster_ip.spec.cluster_ip]
    assert cluster_ip.spec.ports[0].node_port is None


def test_services_collection_delete_is_served(v1: client.CoreV1Api, namespace: str) -> None:
    for name in ("a", "b"):
        v1.create_namespaced_service(
            namespace,
            client.V1Service(
                metadata=client.V1ObjectMeta(name=name, labels={"drop": "yes"}),
                spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)]),
            ),
        )
    v1.delete_collection_namespaced_service(namespace, label_selector="drop=yes")
    assert v1.list_namespaced_service(namespace).items == []


def test_strategic_merge_patch_puts_an_added_container_first(kubectl, namespace: str) -> None:
    kubectl("create", "deployment", "web", "-n", namespace, "--image=busybox")
    kubectl(
        "patch",
        "deployment",
        "web",
        "-n",
        namespace,
        "-p",
        json.dumps(
            {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}}}
        ),
    )
    names = kubectl(
        "get", "deployment", "web", "-n", namespace, "-o", "jsonpath={.spec.template.spec.containers[*].name}"
    )
    assert names.split() == ["sidecar", "busybox"]


def test_custom_resource_finalizers_follow_the_custom_resource_rule(kubectl, namespace: str) -> None:
    """A custom resource may carry an unqualified finalizer (a warning says to qualify it); a built-in
    kind may not."""
    crd = open_crd("strategies.example.com", "Fin", "fins")
    try:
        kubectl("apply", "-f", "-", input=json.dumps(crd))
        kubectl("wait", "--for=condition=Established", "crd/fins.strategies.example.com", "--timeout=30s")
        fin = {
            "apiVersion": "strategies.example.com/v1",
            "kind": "Fin",
            "metadata": {"name": "f", "finalizers": ["test-finalizer", "example.com/fine"]},
        }
        made = kubectl.run("create", "-n", namespace, "-f", "-", input=json.dumps(fin), check=False)
        assert made.returncode == 0, made.stderr
        assert (
            'Warning: metadata.finalizers: "test-finalizer": prefer a domain-qualified finalizer name'
            in made.stderr
        )
        assert "example.com/fine" not in made.stderr
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "f", "finalizers": ["test-finalizer"]},
        }
        refused = kubectl.run("create", "-n", namespace, "-f", "-", input=json.dumps(configmap), check=False)
        assert refused.returncode == 1
        assert "name is neither a standard finalizer name nor is it fully qualified" in refused.stderr
        kubectl(
            "patch", "fin", "f", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
    finally:
        kubectl.run("delete", "crd", "fins.strategies.example.com", "--wait=true", check=False)


def test_openapi_v2_publishes_custom_schemas_as_upstream(kubectl, apiserver: ApiServer) -> None:
    """A root that keeps unknown fields is a bare object in v2 (upstream's buildKubeNative); inside a
    schema, a node keeping unknown fields loses its properties and a nullable one its type."""
    inner = {
        "type": "object",
        "required": ["loose", "maybe"],
        "properties": {
            "loose": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"a": {"type": "string"}},
            },
            "maybe": {"type": "string", "nullable": True},
            "kept": {"type": "integer"},
        },
    }
    versions = [
        {
            "name": "v1",
            "served": True,
            "storage": True,
            "schema": {
                "openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"spec": {"type": "object"}},
                }
            },
        },
        {
            "name": "v2",
            "served": True,
            "storage": False,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": inner}}},
        },
    ]
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "loosies.openapi.example.com"},
        "spec": {
            "group": "openapi.example.com",
            "names": {"kind": "Loosy", "plural": "loosies", "singular": "loosy", "listKind": "LoosyList"},
            "scope": "Namespaced",
            "versions": versions,
        },
    }
    try:
        kubectl("apply", "-f", "-", input=json.dumps(crd))
        kubectl("wait", "--for=condition=Established", "crd/loosies.openapi.example.com", "--timeout=30s")
        status, body, _ = fetch(apiserver, "/openapi/v2")
        definitions = json.loads(body)["definitions"]
        assert status == 200
        assert definitions["com.example.openapi.v1.Loosy"] == {
            "type": "object",
            "x-kubernetes-group-version-kind": [
                {"group": "openapi.example.com", "version": "v1", "kind": "Loosy"}
            ],
        }
        spec = definitions["com.example.openapi.v2.Loosy"]["properties"]["spec"]
        assert spec["properties"]["loose"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        assert spec["properties"]["maybe"] == {}
        assert spec["properties"]["kept"] == {"type": "integer"}
        assert spec["required"] == ["loose"]
    finally:
        kubectl.run("delete", "crd", "loosies.openapi.example.com", "--wait=true", check=False)


DUPLICATED = (
    b'{"metadata":{"name":"dup"},"spec":{"replicas":1,"replicas":2,'
    b'"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},'
    b'"spec":{"containers":[{"name":"c","image":"busybox","image":"busybox"}]}}}}'
)


def test_duplicate_fields_are_reported_as_upstream(apiserver: ApiServer, namespace: str) -> None:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    status, body, _ = exchange(apiserver, path + "?fieldValidation=Strict", "POST", DUPLICATED)
    assert status == 400
    assert json.loads(body)["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        'duplicate field "spec.replicas", duplicate field "spec.template.spec.containers[0].image"'
    )
    status, body, headers = exchange(apiserver, path, "POST", DUPLICATED)  # Warn, the default
    assert status == 201 and json.loads(body)["spec"]["replicas"] == 2  # the last one wins, as in Go
    assert headers.get_all("Warning") == [
        '299 - "duplicate field \\"spec.replicas\\""',
        '299 - "duplicate field \\"spec.template.spec.containers[0].image\\""',
    ]
