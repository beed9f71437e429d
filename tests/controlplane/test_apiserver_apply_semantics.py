"""Server-side apply and create semantics as kube-apiserver 1.32 has them, through the real server and
kubectl: an apply that changes nothing writes nothing, a map emptied and refilled keeps its content, the
applier of a CRD never owns its status, conflicts in upstream's words, a server dry-run create of an
existing object is 409."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kubernetes import client, watch

from e2e.manifests import open_crd
from pykubelet.rig.apiserver import ApiServer

from .test_apiserver_wire import fetch

pytestmark = pytest.mark.integration


def apply(
    server: ApiServer, path: str, obj: dict, manager: str, force: bool = False, validation: str = ""
) -> tuple[int, dict]:
    query = f"?fieldManager={manager}" + ("&force=true" if force else "")
    query += f"&fieldValidation={validation}" if validation else ""
    status, body, _ = fetch(
        server, path + query, "PATCH", json.dumps(obj).encode(), "application/apply-patch+yaml"
    )
    return status, json.loads(body)


def into_next_second() -> None:
    """managedFields times have a resolution of one second: a rewrite within the same second could not
    be told from a kept entry, so the repeat happens in a later second."""
    time.sleep(1.0 - time.time() % 1.0 + 0.01)


def configmap(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_server_dry_run_create_of_an_existing_object_is_already_exists(kubectl, namespace: str) -> None:
    kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=a=1")
    again = kubectl.run(
        "create", "configmap", "c", "-n", namespace, "--from-literal=a=1", "--dry-run=server", check=False
    )
    assert again.returncode == 1
    assert again.stderr.strip() == 'error: failed to create configmap: configmaps "c" already exists'
    again = kubectl.run(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        "--dry-run=server",
        input=json.dumps(configmap("c")),
        check=False,
    )
    assert again.returncode == 1
    assert again.stderr.strip() == (
        'Error from server (AlreadyExists): error when creating "STDIN": configmaps "c" already exists'
    )


def test_apply_that_changes_nothing_does_not_write(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/c"
    status, first = apply(apiserver, path, configmap("c", a="1"), "gitops")
    assert status == 201
    rv = first["metadata"]["resourceVersion"]
    events: list[tuple[str, str]] = []
    stream = watch.Watch()

    def collect() -> None:
        for event in stream.stream(
            v1.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=30
        ):
            events.append((event["type"], event["object"].metadata.resource_version))
            stream.stop()

    watcher = threading.Thread(target=collect)
    watcher.start()
    into_next_second()
    status, again = apply(apiserver, path, configmap("c", a="1"), "gitops")
    assert status == 200 and again["metadata"]["resourceVersion"] == rv
    assert again["metadata"]["managedFields"] == first["metadata"]["managedFields"]
    # A real change after the no-op: the watch's first event is that change, never a write of the no-op.
    status, changed = apply(apiserver, path, configmap("c", a="2"), "gitops")
    assert status == 200 and changed["metadata"]["resourceVersion"] != rv
    watcher.join(timeout=40)
    assert events == [("MODIFIED", changed["metadata"]["resourceVersion"])]


def test_kubectl_server_side_reapply_keeps_the_resource_version(kubectl, namespace: str) -> None:
    manifest = json.dumps(configmap("gitops", a="1"))
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=manifest)
    before = json.loads(kubectl("get", "configmap", "gitops", "-n", namespace, "-o", "json"))
    into_next_second()
    out = kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=manifest)
    assert "serverside-applied" in out
    after = json.loads(kubectl("get", "configmap", "gitops", "-n", namespace, "-o", "json"))
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_map_emptied_then_refilled_keeps_its_new_content(apiserver: ApiServer, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/m"
    obj = configmap("m")
    obj["metadata"]["labels"] = {"a": "1"}
    assert apply(apiserver, path, obj, "tool")[0] == 201
    obj["metadata"]["labels"] = {}
    status, emptied = apply(apiserver, path, obj, "tool")
    assert status == 200 and not emptied["metadata"].get("labels")
    obj["metadata"]["labels"] = {"b": "2"}
    status, refilled = apply(apiserver, path, obj, "tool")
    assert status == 200 and refilled["metadata"]["labels"] == {"b": "2"}


def test_apply_conflicts_in_upstreams_words(apiserver: ApiServer, namespace: str) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    made = json.dumps(configmap("x", a="1", b="2")).encode()
    assert fetch(apiserver, base + "?fieldManager=alice", "POST", made)[0] == 201
    status, err = apply(apiserver, base + "/x", configmap("x", a="9", b="8"), "bob")
    assert status == 409 and err["reason"] == "Conflict"
    assert (
        err["message"]
        == 'Apply failed with 2 conflicts: conflicts with "alice" using v1:\n- .data.a\n- .data.b'
    )
    assert err["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice" using v1', "field": ".data.a"},
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice" using v1', "field": ".data.b"},
    ]
    # An applier is named without a version; a keyed list item with its key quoted.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    pods = f"/api/v1/namespaces/{namespace}/pods/p"
    assert apply(apiserver, pods, pod, "first")[0] == 201
    pod["spec"]["containers"][0]["image"] = "busybox:2"
    status, err = apply(apiserver, pods, pod, "second")
    assert status == 409
    assert err["message"] == (
        'Apply failed with 1 conflict: conflict with "first": .spec.containers[name="c"].image'
    )


CRD = open_crd(
    "ssa.example.com",
    "Gadget",
    "gadgets",
    # The stub controller-gen writes into many a published manifest.
    status={"acceptedNames": {"kind": "", "plural": ""}, "conditions": [], "storedVersions": []},
)


def test_crd_applier_never_owns_status(kubectl) -> None:
    name = CRD["metadata"]["name"]
    try:
        kubectl("apply", "-f", "-", input=json.dumps(CRD))  # client-side first, as most installs began

        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
        out = kubectl.run("apply", "--server-side", "-f", "-", input=json.dumps(CRD), check=False)
        assert out.returncode == 0, out.stderr
        got = json.loads(kubectl("get", "crd", name, "-o", "json", "--show-managed-fields"))
        for entry in got["metadata"]["managedFields"]:
            if entry.get("subresource") != "status":
                assert "f:status" not in entry["fieldsV1"], entry
        assert got["status"]["acceptedNames"]["kind"] == "Gadget"
    finally:
        kubectl.run("delete", "crd", name, "--wait=true", check=False)


def test_apply_of_an_undeclared_field_fails_as_upstreams_field_manager(
    kubectl, apiserver: ApiServer, namespace: str
) -> None:
    """The applied configuration is typed before anything else: a field the type does not declare is
    upstream's 500 'failed to create typed patch object (...): .PATH: field not declared in schema',
    whatever fieldValidation asks."""
    bad = configmap("typo", a="1")
    bad["data_error"] = {"b": "2"}
    for validation in ("Ignore", "Strict"):
        status, body = apply(
            apiserver, f"/api/v1/namespaces/{namespace}/configmaps/typo", bad, "tool", validation=validation
        )
        assert status == 500 and body == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"failed to create typed patch object ({namespace}/typo; /v1, Kind=ConfigMap): "
            ".data_error: field not declared in schema",
            "code": 500,
        }, (validation, body)
    out = kubectl.run(
        "apply", "--server-side", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False
    )
    assert out.returncode == 1 and ".data_error: field not declared in schema" in out.stderr
    gadget = {
        "apiVersion": "ssa.example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g"},
        "spec": {"x": 1},
    }
    typed_crd = json.loads(json.dumps(CRD))
    typed_crd["spec"]["versions"][0]["schema"] = {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {}}}}
    }
    del typed_crd["status"]
    try:
        kubectl("apply", "-f", "-", input=json.dumps(typed_crd))
        kubectl("wait", "--for=condition=Established", f"crd/{CRD['metadata']['name']}", "--timeout=30s")
        status, body = apply(
            apiserver, f"/apis/ssa.example.com/v1/namespaces/{namespace}/gadgets/g", gadget, "tool"
        )
        assert status == 500
        assert body["message"] == (
            f"failed to create typed patch object ({namespace}/g; ssa.example.com/v1, Kind=Gadget): "
            ".spec.x: field not declared in schema"
        )
    finally:
        kubectl.run("delete", "crd", CRD["metadata"]["name"], "--wait=true", check=False)


# CoreDNS as kubeadm 1.32 deploys it (its ports as kubeadm writes them): 53 over UDP and over TCP.
COREDNS_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "coredns", "labels": {"k8s-app": "kube-dns"}},
    "spec": {
        "replicas": 2,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
        "template": {
            "metadata": {"labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "priorityClassName": "system-cluster-critical",
                "tolerations": [
                    {"key": "CriticalAddonsOnly", "operator": "Exists"},
                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                ],
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "containers": [
                    {
                        "name": "coredns",
                        "image": "registry.k8s.io/coredns/coredns:v1.11.3",
                        "imagePullPolicy": "IfNotPresent",
                        "resources": {
                            "limits": {"memory": "170Mi"},
                            "requests": {"cpu": "100m", "memory": "70Mi"},
                        },
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "volumeMounts": [
                            {"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}
                        ],
                        "ports": [
                            {"containerPort": 53, "name": "dns", "protocol": "UDP"},
                            {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
                            {"containerPort": 9153, "name": "metrics", "protocol": "TCP"},
                        ],
                        "livenessProbe": {
                            "httpGet": {"path": "/health", "port": 8080, "scheme": "HTTP"},
                            "initialDelaySeconds": 60,
                            "timeoutSeconds": 5,
                            "successThreshold": 1,
                            "failureThreshold": 5,
                        },
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181, "scheme": "HTTP"}},
                    }
                ],
                "dnsPolicy": "Default",
                "volumes": [
                    {
                        "name": "config-volume",
                        "configMap": {"name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]},
                    }
                ],
            },
        },
    },
}
COREDNS_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {
        "name": "kube-dns",
        "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
        "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
    },
    "spec": {
        "selector": {"k8s-app": "kube-dns"},
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
            {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
        ],
    },
}


def test_kubectl_server_side_apply_of_coredns_keeps_both_protocols(kubectl, namespace: str) -> None:
    """Ports are keyed by port and protocol (upstream's x-kubernetes-list-map-keys): applied twice through
    kubectl, CoreDNS's Deployment and Service keep 53/UDP and 53/TCP, the second apply changes nothing and
    `kubectl diff --server-side` finds no difference."""
    manifest = json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [COREDNS_DEPLOYMENT, COREDNS_SERVICE]}
    )
    kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=manifest)
    first = json.loads(
        kubectl(
            "get",
            "deployment/coredns",
            "service/kube-dns",
            "-n",
            namespace,
            "-o",
            "json",
            "--show-managed-fields",
        )
    )
    into_next_second()
    out = kubectl("apply", "--server-side", "-n", namespace, "-f", "-", input=manifest)
    assert out.split("\n")[:2] == [
        "deployment.apps/coredns serverside-applied",
        "service/kube-dns serverside-applied",
    ]
    again = json.loads(
        kubectl(
            "get",
            "deployment/coredns",
            "service/kube-dns",
            "-n",
            namespace,
            "-o",
            "json",
            "--show-managed-fields",
        )
    )
    deployment, service = again["items"]
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert [(p["name"], p["containerPort"], p["protocol"]) for p in ports] == [
        ("dns", 53, "UDP"),
        ("dns-tcp", 53, "TCP"),
        ("metrics", 9153, "TCP"),
    ]
    assert [(p["name"], p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [
        ("dns", 53, "UDP"),
        ("dns-tcp", 53, "TCP"),
        ("metrics", 9153, "TCP"),
    ]
    for before, after in zip(first["items"], again["items"], strict=True):
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # Each port is its own owned item, as upstream's managedFields name them.
    applied = next(m for m in deployment["metadata"]["managedFields"] if m["operation"] == "Apply")
    container = applied["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"coredns"}']
    assert set(container["f:ports"]) == {
        'k:{"containerPort":53,"protocol":"UDP"}',
        'k:{"containerPort":53,"protocol":"TCP"}',
        'k:{"containerPort":9153,"protocol":"TCP"}',
    }
    diff = kubectl.run("diff", "--server-side", "-n", namespace, "-f", "-", input=manifest, check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr
