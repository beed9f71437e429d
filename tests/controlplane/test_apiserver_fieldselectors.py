"""Field selectors against the real API server, kind by kind as upstream 1.32's registry supports them:
the fields each kind's strategy exposes and its group version's label conversion accepts (core/v1's
AddFieldLabelConversionFunc for Pod, Node, Service, ..., batch/v1's for Job and CronJob,
certificates/v1's for CSR, apimachinery's DefaultMetaV1FieldSelectorConversion for every other kind),
each with `=`, `==`, `!=` and several terms, and the 400 text of the conversion that refuses a label;
`kubectl get svc -A --field-selector spec.clusterIP!=None` (the upstream kubelet's list); a CRD's
selectableFields (validation texts, lists, a cluster-scoped CR refusing metadata.namespace); a watch
whose object stops matching gets DELETED with the state that matched."""

from __future__ import annotations

import copy
import json
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from tests.controlplane.conftest import Kubectl
from tests.controlplane.joinutil import CLIENT, csr_body, make_csr
from tests.controlplane.test_apiserver_crd import delete_crd, established, raw, served, wait_for

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
CONTAINERS = [{"name": "c", "image": "busybox"}]
TEMPLATE = {
    "metadata": {"labels": {"app": "a"}},
    "spec": {"restartPolicy": "Never", "containers": CONTAINERS},
}
SERVING_TEMPLATE = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": CONTAINERS}}
DEFAULT_TEXT = '"{}" is not a known field selector: only "metadata.name", "metadata.namespace"'


@dataclass
class Case:
    """A kind's collection (`{ns}`: the test's namespace; `{u}`: a unique suffix for cluster-scoped
    names), the objects the test creates there, (label, value, names that match) and a refused label
    with upstream's 400 text."""

    path: str
    objects: list[Obj]
    selects: list[tuple[str, str, set[str]]]
    refused: tuple[str, str]
    cluster: bool = False
    extra: set[str] = field(default_factory=set)  # objects of the collection the test does not create


def event(name: str, ns: str, kind: str, obj_name: str, reason: str, type_: str, component: str) -> Obj:
    return {
        "metadata": {"name": name},
        "involvedObject": {
            "kind": kind,
            "name": obj_name,
            "namespace": ns,
            "uid": f"uid-{obj_name}",
            "apiVersion": "v1",
            "fieldPath": "spec.containers{c}",
        },
        "reason": reason,
        "message": "m",
        "type": type_,
        "source": {"component": component},
    }


def cases(ns: str, u: str) -> dict[str, Case]:
    csr_client, _ = make_csr(f"fs-user-{u}", orgs=())
    csr_other, _ = make_csr(f"fs-other-{u}", orgs=())
    return {
        "pods": Case(
            "/api/v1/namespaces/{ns}/pods",
            [
                {
                    "metadata": {"name": "p1"},
                    "spec": {
                        "nodeName": f"fs-node-{u}",
                        "restartPolicy": "Never",
                        "schedulerName": "other-scheduler",
                        "hostNetwork": True,
                        "containers": CONTAINERS,
                    },
                },
                {"metadata": {"name": "p2"}, "spec": {"containers": CONTAINERS}},
            ],
            [
                ("spec.nodeName", f"fs-node-{u}", {"p1"}),
                ("spec.host", f"fs-node-{u}", {"p1"}),  # old clients' name, converted to spec.nodeName
                ("spec.restartPolicy", "Never", {"p1"}),
                ("spec.schedulerName", "default-scheduler", {"p2"}),
                ("spec.hostNetwork", "true", {"p1"}),
                ("spec.hostNetwork", "false", {"p2"}),
                ("status.phase", "Pending", {"p1", "p2"}),
                ("status.podIP", "", {"p1", "p2"}),
                ("status.podIPs", "", {"p1", "p2"}),  # accepted, never exposed: "" for every pod
                ("status.podIPs", "10.0.0.1", set()),
                ("status.nominatedNodeName", "", {"p1", "p2"}),
                ("metadata.name", "p2", {"p2"}),
                ("metadata.namespace", ns, {"p1", "p2"}),
            ],
            ("spec.containers", "field label not supported: spec.containers"),
        ),
        "services": Case(
            "/api/v1/namespaces/{ns}/services",
            [
                {"metadata": {"name": "s1"}, "spec": {"ports": [{"port": 80}]}},
                {"metadata": {"name": "s2"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}},
                {"metadata": {"name": "s3"}, "spec": {"type": "ExternalName", "externalName": "example.com"}},
            ],
            [
                ("spec.clusterIP", "None", {"s2"}),
                ("spec.clusterIP", "", {"s3"}),
                ("spec.type", "ClusterIP", {"s1", "s2"}),
                ("spec.type", "ExternalName", {"s3"}),
            ],
            ("spec.ports", "field label not supported: spec.ports"),
        ),
        "secrets": Case(
            "/api/v1/namespaces/{ns}/secrets",
            [
                {"metadata": {"name": "x1"}, "stringData": {"k": "v"}},
                {"metadata": {"name": "x2"}, "type": "example.com/custom", "stringData": {"k": "v"}},
            ],
            [("type", "example.com/custom", {"x2"}), ("type", "Opaque", {"x1"})],
            ("data.k", "field label not supported: data.k"),
        ),
        "replicationcontrollers": Case(
            "/api/v1/namespaces/{ns}/replicationcontrollers",
            [
                {
                    "metadata": {"name": "rc1"},
                    "spec": {"replicas": 0, "selector": {"app": "a"}, "template": SERVING_TEMPLATE},
                }
            ],
            [("status.replicas", "0", {"rc1"}), ("status.replicas", "1", set())],
            ("spec.replicas", "field label not supported: spec.replicas"),
        ),
        "events": Case(
            "/api/v1/namespaces/{ns}/events",
            [
                event("e1", ns, "Pod", "x", "Started", "Normal", "kubelet"),
                event("e2", ns, "ConfigMap", "y", "Failed", "Warning", "example.com/ctl"),
            ],
            [
                ("involvedObject.kind", "Pod", {"e1"}),
                ("involvedObject.name", "y", {"e2"}),
                ("involvedObject.namespace", ns, {"e1", "e2"}),
                ("involvedObject.uid", "uid-x", {"e1"}),
                ("involvedObject.apiVersion", "v1", {"e1", "e2"}),
                ("involvedObject.resourceVersion", "", {"e1", "e2"}),
                ("involvedObject.fieldPath", "spec.containers{c}", {"e1", "e2"}),
                ("reason", "Started", {"e1"}),
                ("type", "Warning", {"e2"}),
                ("source", "kubelet", {"e1"}),
                ("reportingComponent", "", {"e1", "e2"}),
            ],
            ("message", "field label not supported: message"),
        ),
        "events.k8s.io": Case(
            "/apis/events.k8s.io/v1/namespaces/{ns}/events",
            [
                {
                    "metadata": {"name": "v1"},
                    "regarding": {"kind": "Pod", "name": "x", "namespace": ns},
                    "reportingController": "example.com/ctl",
                    "reportingInstance": "i-1",
                    "action": "Act",
                    "reason": "R",
                    "type": "Normal",
                    "eventTime": "2024-01-01T00:00:00.000000Z",
                }
            ],
            [
                ("regarding.name", "x", {"v1"}),
                ("regarding.kind", "Node", set()),
                ("reportingController", "example.com/ctl", {"v1"}),
                ("source", "example.com/ctl", {"v1"}),  # no source.component: upstream reads the reporter
                ("reason", "R", {"v1"}),
                ("type", "Normal", {"v1"}),
            ],
            ("note", "field label not supported: note"),
        ),
        "namespaces": Case(
            "/api/v1/namespaces",
            [],
            [("status.phase", "Active", {ns}), ("metadata.name", ns, {ns})],
            ("metadata.namespace", "field label not supported: metadata.namespace"),
            cluster=True,
            extra={ns},
        ),
        "nodes": Case(
            "/api/v1/nodes",
            [
                {"metadata": {"name": "fs-n1-{u}"}, "spec": {"unschedulable": True}},
                {"metadata": {"name": "fs-n2-{u}"}},
            ],
            [("spec.unschedulable", "true", {"fs-n1-{u}"}), ("spec.unschedulable", "false", {"fs-n2-{u}"})],
            ("metadata.namespace", "field label not supported: metadata.namespace"),
            cluster=True,
        ),
        "jobs": Case(
            "/apis/batch/v1/namespaces/{ns}/jobs",
            [{"metadata": {"name": "j1"}, "spec": {"template": TEMPLATE}}],
            [("status.successful", "0", {"j1"}), ("status.successful", "1", set())],
            ("status.active", 'field label "status.active" not supported for "Job"'),
        ),
        "cronjobs": Case(
            "/apis/batch/v1/namespaces/{ns}/cronjobs",
            [
                {
                    "metadata": {"name": "cj1"},
                    "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": TEMPLATE}}},
                }
            ],
            # batch/v1 accepts status.successful for CronJobs, whose strategy never exposes it
            [("status.successful", "", {"cj1"}), ("status.successful", "0", set())],
            ("spec.schedule", 'field label "spec.schedule" not supported for "CronJob"'),
        ),
        "certificatesigningrequests": Case(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            [
                csr_body("fs-c1-{u}", csr_client, signer=CLIENT),
                csr_body("fs-c2-{u}", csr_other, signer="example.com/signer"),
            ],
            [
                ("spec.signerName", "example.com/signer", {"fs-c2-{u}"}),
                ("spec.signerName", CLIENT, {"fs-c1-{u}"}),
            ],
            ("metadata.namespace", "field label not supported: metadata.namespace"),
            cluster=True,
        ),
        "replicasets": Case(
            "/apis/apps/v1/namespaces/{ns}/replicasets",
            [
                {
                    "metadata": {"name": "rs1"},
                    "spec": {
                        "replicas": 0,
                        "selector": {"matchLabels": {"app": "a"}},
                        "template": SERVING_TEMPLATE,
                    },
                }
            ],
            [("metadata.name", "rs1", {"rs1"})],
            # apps/v1 registers no label conversion: the default one, which knows no status.replicas
            ("status.replicas", DEFAULT_TEXT.format("status.replicas")),
        ),
        "configmaps": Case(
            "/api/v1/namespaces/{ns}/configmaps",
            [{"metadata": {"name": "cm1"}}, {"metadata": {"name": "cm2"}}],
            [("metadata.name", "cm1", {"cm1"}), ("metadata.namespace", ns, {"cm1", "cm2"})],
            ("data.k", DEFAULT_TEXT.format("data.k")),
        ),
    }


def listed(api: client.ApiClient, path: str, selector: str) -> tuple[int, Obj]:
    return raw(api, "GET", f"{path}?fieldSelector={urllib.parse.quote(selector)}")


def names(body: Obj) -> set[str]:
    return {item["metadata"]["name"] for item in body["items"]}


def fill(value: Any, u: str) -> Any:
    """`{u}` replaced in names (cluster-scoped objects of this test only)."""
    return json.loads(json.dumps(value).replace("{u}", u))


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:6]


@pytest.mark.parametrize("kind", list(cases("ns", "u")))
def test_each_kinds_fields_as_upstream(api: client.ApiClient, namespace: str, unique: str, kind: str) -> None:
    case = cases(namespace, unique)[kind]
    path = case.path.format(ns=namespace)
    created = []
    try:
        for obj in case.objects:
            status, body = raw(api, "POST", path, fill(obj, unique))
            assert status == 201, body
            created.append(body["metadata"]["name"])
        ours = set(created) | case.extra
        first = sorted(ours)[0]
        for label, value, expected in case.selects:
            expected = {fill(n, unique) for n in expected}
            value = fill(value, unique)
            for op in ("=", "=="):
                status, body = listed(api, path, f"{label}{op}{value}")
                assert status == 200, body
                assert names(body) & ours == expected, (label, op, value)
            status, body = listed(api, path, f"{label}!={value}")
            assert status == 200, body
            assert names(body) & ours == ours - expected, (label, "!=", value)
            # several terms: all must hold
            status, body = listed(api, path, f"{label}={value},metadata.name={first}")
            assert status == 200, body
            assert names(body) & ours == expected & {first}, (label, value, first)
            status, body = listed(api, path, f"metadata.name!={first},{label}!={value}")
            assert status == 200, body
            assert names(body) & ours == ours - expected - {first}, (label, value, first)
        label, text = case.refused
        status, body = listed(api, path, f"{label}=x")
        assert (status, body.get("reason"), body.get("message")) == (400, "BadRequest", text)
    finally:
        if case.cluster:
            for name in created:
                raw(api, "DELETE", f"{path}/{name}")


def test_kubectl_lists_services_with_a_cluster_ip(
    api: client.ApiClient, namespace: str, kubectl: Kubectl
) -> None:
    # The upstream kubelet's list of Services: every one with a cluster IP, headless ones left out.
    path = f"/api/v1/namespaces/{namespace}/services"
    for body in (
        {"metadata": {"name": "with-ip"}, "spec": {"ports": [{"port": 80}]}},
        {"metadata": {"name": "headless"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}},
    ):
        assert raw(api, "POST", path, body)[0] == 201
    out = kubectl("get", "svc", "-A", "--field-selector", "spec.clusterIP!=None", "-o", "json")
    shown = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in json.loads(out)["items"]}
    assert (namespace, "with-ip") in shown and (namespace, "headless") not in shown
    assert ("default", "kubernetes") in shown
    refused = kubectl.run("get", "svc", "-A", "--field-selector", "spec.ports=1", check=False)
    assert refused.returncode != 0 and "field label not supported: spec.ports" in refused.stderr


SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "color": {"type": "string"},
                "size": {"type": "integer"},
                "enabled": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "nested": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        },
    },
}


def widgets(group: str, scope: str, selectable: list[str]) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": copy.deepcopy(SCHEMA)},
                    "selectableFields": [{"jsonPath": p} for p in selectable],
                }
            ],
        },
    }


@pytest.fixture
def widget_crd(api: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(api)
    group = f"fs{uuid.uuid4().hex[:8]}.example.com"
    status, body = raw(
        api,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widgets(group, "Namespaced", [".spec.color", ".spec.size", ".spec.enabled", ".spec.nested.x"]),
    )
    assert status == 201, body.get("message")
    wait_for(lambda: established(ext, f"widgets.{group}") and served(api, group, "v1"))
    yield group
    delete_crd(ext, f"widgets.{group}")


def test_crd_selectable_fields_validation(api: client.ApiClient) -> None:
    group = f"fs{uuid.uuid4().hex[:8]}.example.com"
    bad = [
        "spec.color",  # no leading dot
        ".spec.missing",
        ".spec.tags",
        ".spec.nested",
        ".spec.tags[0]",
        ".metadata.name",
        ".spec.color",
        ".spec.color",
        "",
    ]
    status, body = raw(
        api,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        widgets(group, "Namespaced", bad),
    )
    assert status == 422, body
    at = "spec.versions[0].selectableFields"
    causes = {(c["field"], c["message"]) for c in body["details"]["causes"]}
    must_be = (
        "must point to a field of type string, boolean or integer. "
        "Enum string fields and strings with formats are allowed."
    )
    assert causes >= {
        (
            f"{at}[0].jsonPath",
            'Invalid value: "spec.color": is an invalid path: expected [ or . but got: spec',
        ),
        (
            f"{at}[1].jsonPath",
            'Invalid value: ".spec.missing": is an invalid path: does not refer to a valid field',
        ),
        (f"{at}[2].jsonPath", f'Invalid value: ".spec.tags": {must_be}'),
        (f"{at}[3].jsonPath", f'Invalid value: ".spec.nested": {must_be}'),
        (
            f"{at}[4].jsonPath",
            'Invalid value: ".spec.tags[0]": is an invalid path: array notation is not allowed',
        ),
        (f"{at}[7].jsonPath", 'Duplicate value: ".spec.color"'),
        (f"{at}[8].jsonPath", "Required value"),
    }, causes
    # nine distinct valid fields: one too many
    many = {f"f{i}": {"type": "string"} for i in range(9)}
    crd = widgets(group, "Namespaced", [f".spec.f{i}" for i in range(9)])
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"] = many
    status, body = raw(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert status == 422, body
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        (at, "Too many: 9: must have at most 8 items")
    ]


def test_crd_selectable_fields_in_lists(api: client.ApiClient, namespace: str, widget_crd: str) -> None:
    path = f"/apis/{widget_crd}/v1/namespaces/{namespace}/widgets"
    specs = {
        "w1": {"color": "red", "size": 3, "enabled": True, "nested": {"x": "a"}},
        "w2": {"color": "blue", "size": 5},
    }
    for name, spec in specs.items():
        status, body = raw(
            api,
            "POST",
            path,
            {"apiVersion": f"{widget_crd}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec},
        )
        assert status == 201, body
    for selector, expected in {
        "spec.color=red": {"w1"},
        "spec.color==blue": {"w2"},
        "spec.color!=red": {"w2"},
        "spec.size=5": {"w2"},
        "spec.enabled=true": {"w1"},
        "spec.enabled=": {"w2"},  # missing: ""
        "spec.nested.x=a,spec.size!=5": {"w1"},
        "spec.color=red,spec.size=5": set(),
        "metadata.namespace=" + namespace: {"w1", "w2"},
    }.items():
        status, body = listed(api, path, selector)
        assert (status, names(body)) == (200, expected), selector
    status, body = listed(api, path, "spec.tags=x")
    assert (status, body.get("message")) == (400, "field label not supported: spec.tags")


def test_cluster_scoped_custom_resources_refuse_metadata_namespace(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    group = f"fs{uuid.uuid4().hex[:8]}.example.com"
    crd = widgets(group, "Cluster", [".spec.color"])
    assert raw(api, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)[0] == 201
    try:
        wait_for(lambda: established(ext, f"widgets.{group}") and served(api, group, "v1"))
        path = f"/apis/{group}/v1/widgets"
        body = {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "c1"},
            "spec": {"color": "red"},
        }
        assert raw(api, "POST", path, body)[0] == 201
        status, answer = listed(api, path, "spec.color=red")
        assert (status, names(answer)) == (200, {"c1"})
        status, answer = listed(api, path, "metadata.namespace=")
        assert (status, answer.get("message")) == (400, "field label not supported: metadata.namespace")
    finally:
        delete_crd(ext, f"widgets.{group}")


def watch_events(api: client.ApiClient, path: str, selector: str, rv: str, count: int) -> list[Obj]:
    """The first `count` events of a watch (bounded by its timeoutSeconds)."""
    query = urllib.parse.urlencode(
        {"watch": "1", "fieldSelector": selector, "resourceVersion": rv, "timeoutSeconds": "20"}
    )
    answer = api.call_api(
        "GET", f"{api.configuration.host}{path}?{query}", header_params={"Accept": "application/json"}
    )
    stream = answer.response  # urllib3's, not preloaded: read as the server writes
    events: list[Obj] = []
    buffer = b""
    try:
        while len(events) < count:
            chunk = stream.read1(65536)
            if not chunk:
                break
            buffer += chunk
            while b"\n" in buffer and len(events) < count:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    events.append(json.loads(line))
    finally:
        # Closed, not returned to the pool: the watch is still open on the server, and a pooled
        # connection would be drained until its timeoutSeconds before the next request could use it.
        stream.close()
        stream.release_conn()
    return events


def test_watch_sends_deleted_with_the_state_that_matched(
    api: client.ApiClient, namespace: str, widget_crd: str
) -> None:
    path = f"/apis/{widget_crd}/v1/namespaces/{namespace}/widgets"
    status, created = raw(
        api,
        "POST",
        path,
        {
            "apiVersion": f"{widget_crd}/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"color": "red"},
        },
    )
    assert status == 201, created
    rv = created["metadata"]["resourceVersion"]
    result: list[list[Obj]] = []
    watcher = threading.Thread(target=lambda: result.append(watch_events(api, path, "spec.color=red", rv, 1)))
    watcher.start()
    status, changed = raw(
        api, "PATCH", f"{path}/w", {"spec": {"color": "blue"}}, "application/merge-patch+json"
    )
    assert status == 200, changed
    watcher.join(30)
    assert result and len(result[0]) == 1, result
    [ev] = result[0]
    # upstream's cacheWatcher: the previous object (which matched), at the update's resourceVersion
    assert ev["type"] == "DELETED"
    assert ev["object"]["spec"]["color"] == "red"
    assert ev["object"]["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]


def test_node_watch_with_a_field_selector(api: client.ApiClient, unique: str) -> None:
    path = "/api/v1/nodes"
    name = f"fs-watch-{unique}"
    status, created = raw(api, "POST", path, {"metadata": {"name": name}})
    assert status == 201, created
    try:
        rv = created["metadata"]["resourceVersion"]
        result: list[list[Obj]] = []
        selector = f"metadata.name={name},spec.unschedulable=false"
        watcher = threading.Thread(target=lambda: result.append(watch_events(api, path, selector, rv, 1)))
        watcher.start()
        status, changed = raw(
            api, "PATCH", f"{path}/{name}", {"spec": {"unschedulable": True}}, "application/merge-patch+json"
        )
        assert status == 200, changed
        watcher.join(30)
        assert result and [e["type"] for e in result[0]] == ["DELETED"], result
        obj = result[0][0]["object"]
        assert "unschedulable" not in obj.get("spec", {})
        assert obj["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    finally:
        raw(api, "DELETE", f"{path}/{name}")
