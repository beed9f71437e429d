"""Protobuf through the real API server, as upstream's Go components speak it: bodies sent as
`application/vnd.kubernetes.protobuf`, answers (objects, lists, Status errors, metadata-only lists)
and watch streams in protobuf when Accept prefers it, custom resources in JSON; bad protobuf is a 400
with upstream's text and writes nothing."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.apiserver.protobuf import codec, wire
from e2e.manifests import open_crd
from pykubelet.rig.apiserver import ApiServer

PB = "application/vnd.kubernetes.protobuf"
# What client-go's protobuf clients send.
PB_ACCEPT = f"{PB}, application/json"


class Http:
    """HTTPS to the API server with the admin's certificate, one connection per request."""

    def __init__(self, server: ApiServer) -> None:
        self.context = ssl.create_default_context(cafile=str(server.ca_cert))
        pki = server.data_dir / "pki"
        self.context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
        self.port = server.port

    def open(
        self, method: str, path: str, body: Any = None, accept: str = PB_ACCEPT, content_type: str = PB
    ) -> http.client.HTTPResponse:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=30)
        headers = {"Accept": accept}
        if isinstance(body, dict):
            body, headers["Content-Type"] = codec.encode_object(body), PB
        elif isinstance(body, bytes):
            headers["Content-Type"] = content_type
        conn.request(method, path, body, headers)
        return conn.getresponse()

    def call(self, method: str, path: str, body: Any = None, accept: str = PB_ACCEPT) -> tuple[int, str, Any]:
        """(status, content type, the answer decoded from protobuf or JSON)."""
        response = self.open(method, path, body, accept)
        data = response.read()
        content_type = response.headers.get("Content-Type", "")
        if content_type.startswith(PB):
            return response.status, content_type, codec.decode_envelope(data)[0]
        return response.status, content_type, json.loads(data) if data else None


@pytest.fixture(scope="module")
def conn(apiserver: ApiServer) -> Http:
    return Http(apiserver)


@pytest.fixture
def ns(conn: Http) -> Iterator[str]:
    name = f"pb-{uuid.uuid4().hex[:8]}"
    status, _, _ = conn.call(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    assert status == 201
    yield name


def _pod(name: str) -> dict[str, Any]:
    """A pod with the fields the old subset dropped: volumes, probes, affinity, tolerations, resources."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "100m"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5},
                    "readinessProbe": {"tcpSocket": {"port": "http"}},
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
            "tolerations": [
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 0}
            ],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
        },
    }


def test_pod_created_in_protobuf_keeps_every_field(conn: Http, ns: str) -> None:
    status, content_type, created = conn.call("POST", f"/api/v1/namespaces/{ns}/pods", _pod("p1"))
    assert status == 201, created
    assert content_type == PB
    spec = created["spec"]
    assert spec["volumes"][0]["emptyDir"] == {"sizeLimit": "1Gi"}
    container = spec["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "64Mi"}
    assert container["livenessProbe"]["httpGet"]["port"] == 8080
    assert container["readinessProbe"]["tcpSocket"]["port"] == "http"
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert spec["tolerations"][0]["tolerationSeconds"] == 0
    assert spec["automountServiceAccountToken"] is False
    assert spec["terminationGracePeriodSeconds"] == 0
    # the same object in JSON, for a JSON client
    status, content_type, as_json = conn.call(
        "GET", f"/api/v1/namespaces/{ns}/pods/p1", accept="application/json"
    )
    assert (status, content_type) == (200, "application/json; charset=utf-8") or content_type.startswith(
        "application/json"
    )
    assert as_json["spec"]["containers"][0]["resources"] == container["resources"]
    status, _, got = conn.call("GET", f"/api/v1/namespaces/{ns}/pods/p1")
    assert status == 200 and got["metadata"]["uid"] == as_json["metadata"]["uid"]
    assert got["kind"] == "Pod" and got["apiVersion"] == "v1"


def test_list_in_protobuf_is_a_pod_list(conn: Http, ns: str) -> None:
    for name in ("a", "b"):
        assert conn.call("POST", f"/api/v1/namespaces/{ns}/pods", _pod(name))[0] == 201
    status, content_type, listed = conn.call("GET", f"/api/v1/namespaces/{ns}/pods")
    assert (status, content_type) == (200, PB)
    assert listed["kind"] == "PodList" and listed["metadata"]["resourceVersion"]
    assert sorted(p["metadata"]["name"] for p in listed["items"]) == ["a", "b"]
    status, _, meta = conn.call(
        "GET",
        f"/api/v1/namespaces/{ns}/pods",
        accept=f"{PB};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json",
    )
    assert status == 200 and meta["kind"] == "PartialObjectMetadataList"
    assert sorted(p["metadata"]["name"] for p in meta["items"]) == ["a", "b"]


def _frames(response: http.client.HTTPResponse, count: int) -> list[dict[str, Any]]:
    events = []
    for _ in range(count):
        (length,) = struct.unpack(">I", response.read(4))
        message = response.read(length)
        fields = {n: v for n, _, v in wire.fields(message)}
        raw = {n: v for n, _, v in wire.fields(fields[2])}[1]
        events.append({"type": fields[1].decode(), "object": codec.decode_envelope(raw)[0]})
    return events


def test_watch_in_protobuf_sends_length_prefixed_watch_events(conn: Http, ns: str) -> None:
    assert conn.call("POST", f"/api/v1/namespaces/{ns}/pods", _pod("w1"))[0] == 201
    response = conn.open("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&timeoutSeconds=5")
    assert response.status == 200
    assert response.headers["Content-Type"] == f"{PB};stream=watch"
    (added,) = _frames(response, 1)
    assert added["type"] == "ADDED" and added["object"]["metadata"]["name"] == "w1"
    assert added["object"]["kind"] == "Pod"
    assert conn.call("DELETE", f"/api/v1/namespaces/{ns}/pods/w1")[0] == 200
    kinds = [e["type"] for e in _frames(response, 1)]
    assert kinds[0] in ("MODIFIED", "DELETED")
    response.close()


def test_a_per_node_watch_in_protobuf_gets_its_pods_binding_and_deletion(conn: Http, ns: str) -> None:
    """A kubelet's watch (fieldSelector spec.nodeName, protobuf, as client-go asks): the watch cache
    routes it by its node, and it gets the binding as ADDED and the deletion, nothing of other nodes."""
    node = f"node-{ns}"
    watch = conn.open("GET", f"/api/v1/pods?watch=1&timeoutSeconds=20&fieldSelector=spec.nodeName%3D{node}")
    assert watch.headers["Content-Type"] == f"{PB};stream=watch"
    for name, target in (("other", f"else-{ns}"), ("mine", node)):
        assert conn.call("POST", f"/api/v1/namespaces/{ns}/pods", _pod(name))[0] == 201
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"kind": "Node", "name": target},
        }
        assert conn.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)[0] == 201
    assert conn.call("DELETE", f"/api/v1/namespaces/{ns}/pods/other?gracePeriodSeconds=0")[0] == 200
    assert conn.call("DELETE", f"/api/v1/namespaces/{ns}/pods/mine?gracePeriodSeconds=0")[0] == 200
    events = [
        (e["type"], e["object"]["metadata"]["name"], e["object"]["spec"]["nodeName"])
        for e in _frames(watch, 2)
    ]
    assert events == [("ADDED", "mine", node), ("DELETED", "mine", node)]
    watch.close()


def test_nodes_events_leases_bindings_and_deployments(conn: Http, ns: str) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"n-{ns}", "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    }
    status, _, got = conn.call("POST", "/api/v1/nodes", node)
    assert status == 201 and got["spec"]["taints"][0]["key"] == "k"
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {
            "holderIdentity": "me",
            "leaseDurationSeconds": 40,
            "renewTime": "2024-01-01T00:00:00.123456Z",
        },
    }
    status, _, got = conn.call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", lease)
    assert status == 201 and got["spec"]["renewTime"] == "2024-01-01T00:00:00.123456Z"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "b1", "namespace": ns},
        "reason": "Test",
        "count": 2,
        "firstTimestamp": "2024-01-01T00:00:00Z",
        "type": "Normal",
    }
    status, _, got = conn.call("POST", f"/api/v1/namespaces/{ns}/events", event)
    assert status == 201 and got["count"] == 2
    new_event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "e2"},
        "eventTime": "2024-01-01T00:00:00.000001Z",
        "reportingController": "x/y",
        "reportingInstance": "i",
        "action": "Do",
        "reason": "Test",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "b1"},
    }
    status, _, got = conn.call("POST", f"/apis/events.k8s.io/v1/namespaces/{ns}/events", new_event)
    assert status == 201, got
    assert (
        conn.call(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            _pod("b1") | {"spec": {**_pod("b1")["spec"], "affinity": None}},
        )[0]
        == 201
    )
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "b1"},
        "target": {"kind": "Node", "name": f"n-{ns}"},
    }
    status, _, got = conn.call("POST", f"/api/v1/namespaces/{ns}/pods/b1/binding", binding)
    assert status == 201, got
    assert conn.call("GET", f"/api/v1/namespaces/{ns}/pods/b1")[2]["spec"]["nodeName"] == f"n-{ns}"
    template = _pod("t")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
        },
    }
    status, _, got = conn.call("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert status == 201, got
    assert got["spec"]["replicas"] == 0
    assert got["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": 1}
    pod_spec = got["spec"]["template"]["spec"]
    assert pod_spec["volumes"][0]["name"] == "data" and pod_spec["containers"][0]["resources"]["limits"]
    assert conn.call("DELETE", f"/api/v1/nodes/n-{ns}")[0] == 200


def test_errors_are_protobuf_status_when_protobuf_was_asked(conn: Http, ns: str) -> None:
    status, content_type, body = conn.call("GET", f"/api/v1/namespaces/{ns}/pods/missing")
    assert (status, content_type) == (404, PB)
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["code"] == 404


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (
            b"not protobuf",
            "the object provided is unrecognized (provided data does not appear to be a protobuf message",
        ),
        (
            codec.encode_envelope("v1", "Pod", b"\x0a\x40\x0a"),
            'Pod in version "v1" cannot be handled as a Pod: unexpected EOF',
        ),
        (b"k8s\x00\x0a\xff\x0f", "the object provided is unrecognized (unexpected EOF"),
        (
            codec.encode_envelope("v1", "Pod", b"\x0f\x01"),
            'Pod in version "v1" cannot be handled as a Pod: illegal wireType 7',
        ),
        (
            codec.encode_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad"}}),
            "the kind in the data (ConfigMap) does not match the expected kind (Pod)",
        ),
        (
            codec.encode_object({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"}}),
            "the API version in the data (apps/v1) does not match the expected API version (v1)",
        ),
    ],
)
def test_bad_protobuf_is_a_400_and_writes_nothing(conn: Http, ns: str, body: bytes, text: str) -> None:
    status, _, answer = conn.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert status == 400, answer
    assert text in answer["message"]
    status, _, listed = conn.call("GET", f"/api/v1/namespaces/{ns}/pods")
    assert status == 200 and listed["items"] == []


def test_a_nesting_bomb_is_a_400(conn: Http, ns: str) -> None:
    inner = b""
    for _ in range(codec.MAX_DEPTH + 10):
        inner = codec.encode_envelope("v1", "WatchEvent", wire.record(2, wire.record(1, inner or b"k8s\x00")))
    revision = {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": "r"},
        "revision": 1,
    }
    data = codec.encode_object(revision)
    api_version, kind, raw = codec.split_envelope(data)
    bomb = codec.encode_envelope(api_version, kind, raw + wire.record(2, wire.record(1, inner)))
    status, _, answer = conn.call("POST", f"/apis/apps/v1/namespaces/{ns}/controllerrevisions", bomb)
    assert status == 400, answer
    assert "max depth" in answer["message"]


def test_custom_resources_stay_json(conn: Http, ns: str) -> None:
    crd = open_crd("pb.example.com", "Widget", "widgets")
    response = conn.open(
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        json.dumps(crd).encode(),
        accept="application/json",
        content_type="application/json",
    )
    created = response.read()
    assert response.status in (201, 409), created
    path = f"/apis/pb.example.com/v1/namespaces/{ns}/widgets"
    widget = {
        "apiVersion": "pb.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"a": 1},
    }
    for _ in range(50):  # the new resource is served once the CRD is established
        answer = conn.open("POST", path, json.dumps(widget).encode(), PB_ACCEPT, "application/json")
        data = answer.read()
        if answer.status != 404:
            break
    # a JSON body: created, and answered in JSON although protobuf was preferred
    assert answer.status == 201, data
    assert answer.headers["Content-Type"].startswith("application/json")
    status, content_type, got = conn.call("GET", f"{path}/w")
    assert status == 200 and content_type.startswith("application/json") and got["spec"] == {"a": 1}
    envelope = codec.encode_envelope("pb.example.com/v1", "Widget", wire.record(1, wire.record(1, b"w2")))
    status, _, answer = conn.call("POST", path, envelope)
    assert status == 415, answer


def test_kubectl_speaks_protobuf_and_json(kubectl: Any, ns: str) -> None:
    """kubectl's generators post protobuf (create configmap / deployment); get -o json stays JSON."""
    kubectl("create", "configmap", "cm", "-n", ns, "--from-literal=a=b")
    kubectl("create", "deployment", "web", "-n", ns, "--image=busybox", "--replicas=0", "--port=80")
    got = json.loads(kubectl("get", "configmap", "cm", "-n", ns, "-o", "json"))
    assert got["data"] == {"a": "b"}
    deployment = json.loads(kubectl("get", "deployment", "web", "-n", ns, "-o", "json"))
    assert deployment["spec"]["replicas"] == 0
    assert deployment["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 80, "protocol": "TCP"}
    ]
    pods = json.loads(kubectl("get", "pods", "-n", ns, "-o", "json"))
    assert pods["kind"] == "List" and pods["items"] == []


def test_delete_options_in_protobuf_from_any_group_version(conn: Http, ns: str) -> None:
    """client-go sends a DELETE's options in the resource's group version (apps/v1 for a Deployment)."""
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gone"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template},
    }
    status, _, created = conn.call("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert status == 201
    wrong_uid = {
        "apiVersion": "apps/v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "not-the-uid"},
        "propagationPolicy": "Background",
    }
    status, _, answer = conn.call("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/gone", wrong_uid)
    assert status == 409 and answer["kind"] == "Status", answer  # the precondition was read
    options = dict(wrong_uid, preconditions={"uid": created["metadata"]["uid"]})
    status, _, _ = conn.call("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/gone", options)
    assert status == 200


def test_metadata_watch_and_table_negotiation(conn: Http, ns: str) -> None:
    """client-go's metadata informers watch PartialObjectMetadata in protobuf; a Table asked in
    protobuf first falls to the JSON alternative, as Tables have no protobuf form."""
    assert conn.call("POST", f"/api/v1/namespaces/{ns}/pods", _pod("m1"))[0] == 201
    accept = f"{PB};as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json"
    response = conn.open("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&timeoutSeconds=5", accept=accept)
    assert response.headers["Content-Type"] == f"{PB};stream=watch"
    (event,) = _frames(response, 1)
    response.close()
    assert event["object"]["kind"] == "PartialObjectMetadata" and event["object"]["metadata"]["name"] == "m1"
    assert "spec" not in event["object"]
    table = (
        f"{PB};as=Table;g=meta.k8s.io;v=v1, application/json;as=Table;g=meta.k8s.io;v=v1, application/json"
    )
    status, content_type, got = conn.call("GET", f"/api/v1/namespaces/{ns}/pods", accept=table)
    assert status == 200 and content_type.startswith("application/json") and got["kind"] == "Table"


_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"


def _same_in_protobuf_and_json(conn: Http, path: str) -> dict[str, Any]:
    """The object at `path` read in protobuf and in JSON (again while a controller moved it between
    the two reads): both forms must be the same object."""
    for _ in range(20):
        status, content_type, in_pb = conn.call("GET", path)
        assert status == 200 and content_type == PB, in_pb
        status, content_type, in_json = conn.call("GET", path, accept="application/json")
        assert status == 200 and content_type.startswith("application/json")
        if in_pb["metadata"]["resourceVersion"] == in_json["metadata"]["resourceVersion"]:
            assert in_pb == in_json
            return in_pb
    raise AssertionError(f"{path} kept changing between reads")


def test_crd_created_in_protobuf_reads_back_the_same_in_protobuf_and_json(conn: Http) -> None:
    """A CRD with a nested schema (properties, items, additionalProperties as bool and as schema,
    defaults, enum, x-kubernetes-int-or-string) posted as protobuf keeps every field; GET and LIST answer
    it in protobuf equal to its JSON; its custom resources stay JSON."""
    spec_schema = {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "default": 3, "minimum": 1, "maximum": 9, "enum": [1, 3, 9]},
            "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "closed": {"type": "object", "additionalProperties": False},
            "tags": {"type": "array", "items": {"type": "string", "default": "x"}},
        },
    }
    crd = open_crd("pbcrd.example.com", "Gadget", "gadgets")
    crd["spec"]["versions"][0]["schema"] = {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}
    }
    name = crd["metadata"]["name"]
    status, content_type, created = conn.call("POST", _CRDS, crd)
    assert status == 201 and content_type == PB, created
    try:
        assert created["kind"] == "CustomResourceDefinition"
        got = _same_in_protobuf_and_json(conn, f"{_CRDS}/{name}")
        assert got["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] == spec_schema
        status, content_type, listed = conn.call("GET", _CRDS)
        assert status == 200 and content_type == PB
        assert listed["kind"] == "CustomResourceDefinitionList"
        assert name in {item["metadata"]["name"] for item in listed["items"]}
        watch = conn.open("GET", f"{_CRDS}?watch=1&timeoutSeconds=20&fieldSelector=metadata.name={name}")
        assert watch.headers["Content-Type"] == f"{PB};stream=watch"
        (event,) = _frames(watch, 1)
        assert event["type"] == "ADDED" and event["object"]["kind"] == "CustomResourceDefinition"
        assert event["object"]["spec"]["versions"][0]["schema"] == crd["spec"]["versions"][0]["schema"]

        def established(obj: dict[str, Any]) -> bool:
            conditions = obj.get("status", {}).get("conditions", [])
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        while not established(event["object"]):  # the watch's timeout bounds the wait
            (event,) = _frames(watch, 1)
        watch.close()
        gadget = {
            "apiVersion": "pbcrd.example.com/v1",
            "kind": "Gadget",
            "metadata": {"name": "g"},
            "spec": {},
        }
        answer = conn.open(
            "POST",
            "/apis/pbcrd.example.com/v1/namespaces/default/gadgets",
            json.dumps(gadget).encode(),
            PB_ACCEPT,
            "application/json",
        )
        data = answer.read()
        assert answer.status == 201, data
        assert answer.headers["Content-Type"].startswith("application/json")  # custom resources: JSON
        assert json.loads(data)["spec"] == {"size": 3}  # the default from the schema posted as protobuf
    finally:
        assert conn.call("DELETE", f"{_CRDS}/{name}")[0] == 200


def test_apiservice_created_in_protobuf_keeps_its_ca_bundle(conn: Http) -> None:
    bundle = b"-----BEGIN CERTIFICATE-----\nMIIBpbext\n-----END CERTIFICATE-----\n"
    service = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1.pbagg.example.com"},
        "spec": {
            "service": {"namespace": "default", "name": "pbagg", "port": 443},
            "group": "pbagg.example.com",
            "version": "v1",
            "caBundle": base64.b64encode(bundle).decode(),
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
        },
    }
    status, content_type, created = conn.call("POST", _APISERVICES, service)
    assert status == 201 and content_type == PB, created
    try:
        got = _same_in_protobuf_and_json(conn, f"{_APISERVICES}/v1.pbagg.example.com")
        assert got["spec"] == service["spec"]
        status, content_type, listed = conn.call("GET", _APISERVICES)
        assert status == 200 and content_type == PB and listed["kind"] == "APIServiceList"
        (item,) = [i for i in listed["items"] if i["metadata"]["name"] == "v1.pbagg.example.com"]
        assert base64.b64decode(item["spec"]["caBundle"]) == bundle
    finally:
        assert conn.call("DELETE", f"{_APISERVICES}/v1.pbagg.example.com")[0] == 200


@pytest.mark.parametrize(
    ("path", "body", "text"),
    [
        (
            _CRDS,
            codec.encode_envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", b"\x12\x05\x0a"),
            'CustomResourceDefinition in version "v1" cannot be handled as a CustomResourceDefinition: '
            "unexpected EOF",
        ),
        (
            _CRDS,
            # a schema's maximum (a double, field 9) sent as a varint
            codec.encode_envelope(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                wire.record(1, wire.record(1, b"bad.pb.example.com"))
                + wire.record(2, wire.record(7, wire.record(4, wire.record(1, b"\x48\x01")))),
            ),
            "cannot be handled as a CustomResourceDefinition: proto: wrong wireType = 0",
        ),
        (
            _APISERVICES,
            codec.encode_envelope("apiregistration.k8s.io/v1", "APIService", b"\x0a\x02\x0a"),
            'APIService in version "v1" cannot be handled as a APIService: unexpected EOF',
        ),
    ],
    ids=["crd-truncated", "crd-schema-wire-type", "apiservice-truncated"],
)
def test_bad_protobuf_crd_or_apiservice_is_a_400(conn: Http, path: str, body: bytes, text: str) -> None:
    status, _, answer = conn.call("POST", path, body)
    assert status == 400, answer
    assert text in answer["message"]
    status, _, listed = conn.call("GET", path)
    assert status == 200 and "bad.pb.example.com" not in {i["metadata"]["name"] for i in listed["items"]}


def test_kubectl_manages_crds_and_apiservices_as_before(kubectl: Any) -> None:
    """kubectl reads and writes CRDs and APIServices through its unstructured (JSON) client: apply,
    get -o json, wait and delete work as before they had a protobuf form, and get prints its Table."""
    crd = open_crd("pbkubectl.example.com", "Thing", "things")
    name = crd["metadata"]["name"]
    kubectl("apply", "-f", "-", input=json.dumps(crd))
    try:
        kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=30s")
        got = json.loads(kubectl("get", "crd", name, "-o", "json"))
        assert got["spec"]["versions"][0]["schema"] == crd["spec"]["versions"][0]["schema"]
        proc = kubectl.run("get", "crd", name, "-v=8")
        assert name in proc.stdout
        lines = proc.stderr.splitlines()
        accepts = [  # -v=8 logs each request's URL, then its headers on the lines after it
            next(h.split("Accept:", 1)[1].strip() for h in lines[at + 1 :] if "Accept:" in h)
            for at, line in enumerate(lines)
            if " GET https" in line and f"customresourcedefinitions/{name}" in line
        ]
        # kubectl asks a Table in JSON: the CRD's protobuf form changes nothing it receives
        assert accepts and all(a.startswith("application/json;as=Table") for a in accepts), accepts
        assert kubectl("get", "apiservices", "v1.apps", "-o", "jsonpath={.spec.version}") == "v1"
    finally:
        kubectl("delete", "crd", name)
