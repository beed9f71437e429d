"""Typed decoding against the real server: values of the wrong type are refused with upstream's 400
(or the 422 upstream's validation gives), quantities and times are stored in canonical form, nothing
malformed is stored or reaches a 500."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.test_apiserver_client import raw

pytestmark = pytest.mark.integration

QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


def _pod(name: str, **container: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", **container}]},
    }


def test_values_of_the_wrong_type_are_a_400_naming_field_and_type(
    apiserver: ApiServer, namespace: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}"
    cases = [
        (
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c"},
                "data": {"k": {"nested": 1}},
            },
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal object into Go struct '
            "field ConfigMap.data of type string",
        ),
        (
            "configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "c"},
            'ConfigMap in version "v1" cannot be handled as a ConfigMap: json: cannot unmarshal string into Go struct '
            "field ConfigMap.metadata of type v1.ObjectMeta",
        ),
        (
            "pods",
            _pod("p", env=[{"name": "A", "value": 5}]),
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into Go struct field '
            "EnvVar.spec.containers.env.value of type string",
        ),
        (
            "pods",
            _pod("p", resources={"limits": {"cpu": "lots"}}),
            f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_ERROR}',
        ),
        (
            "pods",
            _pod("p", ports=[{"containerPort": 1.5}]),
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number 1.5 into Go struct field '
            "ContainerPort.spec.containers.ports.containerPort of type int32",
        ),
        (
            "pods",
            _pod("p", ports=[{"containerPort": 2**40}]),
            'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number 1099511627776 into Go struct '
            "field ContainerPort.spec.containers.ports.containerPort of type int32",
        ),
        (
            "services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "s"},
                "spec": {"ports": [{"port": 80, "targetPort": {"x": 1}}]},
            },
            'Service in version "v1" cannot be handled as a Service: json: cannot unmarshal object into Go struct field '
            "ServicePort.spec.ports.targetPort of type int32",
        ),
        (
            "secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "not base64!"}},
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3',
        ),
        (
            "events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": "e"},
                "involvedObject": {},
                "lastTimestamp": "yesterday",
            },
            'Event in version "v1" cannot be handled as a Event: parsing time "yesterday" as '
            '"2006-01-02T15:04:05Z07:00": cannot parse "yesterday" as "2006"',
        ),
    ]
    for plural, body, message in cases:
        status, answer = raw(apiserver, "POST", f"{base}/{plural}", body)
        assert (status, answer["reason"], answer["message"]) == (400, "BadRequest", message), body
    # Nothing of it was stored.
    for plural in ("configmaps", "pods", "services", "secrets", "events"):
        assert raw(apiserver, "GET", f"{base}/{plural}")[1]["items"] == []


def test_negative_quantities_are_invalid(v1: client.CoreV1Api, namespace: str) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="neg"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c",
                    image="busybox",
                    resources=client.V1ResourceRequirements(requests={"memory": "-1Gi"}),
                )
            ]
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod)
    status = json.loads(err.value.body)
    assert err.value.status == 422 and status["message"] == (
        'Pod "neg" is invalid: spec.containers[0].resources.requests[memory]: Invalid value: "-1Gi": '
        "must be greater than or equal to 0"
    )
    over = client.V1Pod(
        metadata=client.V1ObjectMeta(name="over"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c",
                    image="busybox",
                    resources=client.V1ResourceRequirements(requests={"cpu": "2"}, limits={"cpu": "1"}),
                )
            ]
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, over)
    assert json.loads(err.value.body)["message"] == (
        'Pod "over" is invalid: spec.containers[0].resources.requests: Invalid value: "2": must be less than or '
        "equal to cpu limit of 1"
    )


def test_null_metadata_and_deep_nesting_are_client_errors(apiserver: ApiServer, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    status, body = raw(apiserver, "POST", path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": None})
    assert (status, body["message"]) == (
        422,
        'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required',
    )
    deep = (
        '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d"},"data":'
        + "[" * 5000
        + "]" * 5000
        + "}"
    )
    status, body = raw(apiserver, "POST", path, deep)
    assert status == 400 and "exceeded max depth" in body["message"]
    revision = {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": "r"},
        "revision": 1,
        "data": {},
    }
    node: dict = revision["data"]
    for _ in range(150):  # free-form data has no schema to bound it
        node["x"] = {}
        node = node["x"]
    status, body = raw(
        apiserver, "POST", f"/apis/apps/v1/namespaces/{namespace}/controllerrevisions", revision
    )
    assert (
        status == 400
        and body["message"]
        == "couldn't get version/kind; json parse error: invalid character '{' exceeded max depth"
    )
    status, body = raw(apiserver, "POST", path, "a: " + "[" * 3000, content_type="application/yaml")
    assert status == 400 and "yaml" in body["message"]
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    status, body = raw(apiserver, "POST", path, laughs, content_type="application/yaml")
    assert status == 400 and "excessive aliasing" in body["message"]


def test_quantities_and_times_are_stored_canonical(
    apiserver: ApiServer, v1: client.CoreV1Api, api: client.ApiClient, namespace: str, kubectl
) -> None:  # type: ignore[no-untyped-def]
    body = _pod("canon", resources={"limits": {"cpu": 0.5, "memory": "1.5Gi", "ephemeral-storage": 2}})
    status, created = raw(apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", body)
    assert status == 201
    limits = created["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "500m", "memory": "1536Mi", "ephemeral-storage": "2"}
    assert v1.read_namespaced_pod("canon", namespace).spec.containers[0].resources.requests == limits
    shown = yaml.safe_load(kubectl("get", "pod", "canon", "-n", namespace, "-o", "yaml"))
    assert shown["spec"]["containers"][0]["resources"]["requests"] == limits
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "me", "renewTime": "2030-01-02T03:04:05.5+02:00"},
    }
    status, created = raw(
        apiserver, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", lease
    )
    assert status == 201 and created["spec"]["renewTime"] == "2030-01-02T01:04:05.500000Z"
    renewed = client.CoordinationV1Api(api).read_namespaced_lease("l", namespace).spec.renew_time
    assert renewed.isoformat() == "2030-01-02T01:04:05.500000+00:00"


def test_yaml_bodies_convert_as_upstreams(apiserver: ApiServer, namespace: str) -> None:
    body = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\n  annotations: {when: 2024-01-02T03:04:05Z}\n"
        "data: {day: '2024-01-02'}\n"
    )
    status, created = raw(
        apiserver, "POST", f"/api/v1/namespaces/{namespace}/configmaps", body, content_type="application/yaml"
    )
    assert status == 201 and created["metadata"]["annotations"] == {"when": "2024-01-02T03:04:05Z"}
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: y}\nspec:\n  containers: [{name: c, image: i, ports: [{containerPort: 80.0}], env: [{name: A, value: 5}]}]\n"
    status, answer = raw(
        apiserver, "POST", f"/api/v1/namespaces/{namespace}/pods", pod, content_type="application/yaml"
    )
    assert status == 400 and "EnvVar.spec.containers.env.value of type string" in answer["message"]


def test_a_patch_producing_the_wrong_type_is_invalid(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="p"), data={"a": "1"})
    )
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("p", namespace, [{"op": "add", "path": "/data/b", "value": 2}])
    status = json.loads(err.value.body)
    assert err.value.status == 422 and status["details"]["causes"][0]["field"] == "patch"
    assert (
        "json: cannot unmarshal number into Go struct field ConfigMap.data of type string"
        in status["message"]
    )
    assert v1.read_namespaced_config_map("p", namespace).data == {"a": "1"}


def test_kubectl_reports_the_decoding_error(kubectl, namespace: str) -> None:  # type: ignore[no-untyped-def]
    manifest = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: lots}\nspec:\n  containers:\n"
        "  - {name: c, image: busybox, resources: {limits: {cpu: lots}}}\n"
    )
    bad = kubectl.run("create", "-n", namespace, "-f", "-", input=manifest, check=False)
    assert bad.returncode != 0
    assert f'Pod in version "v1" cannot be handled as a Pod: {QUANTITY_ERROR}' in bad.stderr


def _template(name: str, value_bytes: int) -> dict:
    """A PodTemplate carrying `value_bytes` in one env value: no validation bounds its size."""
    container = {"name": "c", "image": "busybox", "env": [{"name": "BLOB", "value": "x" * value_bytes}]}
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": {"spec": {"containers": [container]}},
    }


def test_objects_over_the_storage_limit_and_bodies_over_the_body_limit(
    apiserver: ApiServer, namespace: str
) -> None:
    """Upstream's two limits: a body over 3 MiB (MaxRequestBodyBytes) is a 413 before it is read; a body
    within it whose object is over etcd's 1.5 MiB request limit reaches the store, which refuses it, and
    upstream answers with etcd's words as a 500 with no reason (its registry translates no such error).
    The SQLite store holds the same limit, so this holds on either store; nothing is written."""
    base = f"/api/v1/namespaces/{namespace}/podtemplates"
    status, body = raw(apiserver, "POST", base, _template("huge", 3 * 1024 * 1024))
    assert (status, body["reason"], body["message"]) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: limit is 3145728",
    )
    status, body = raw(apiserver, "POST", base, _template("big", 1600 * 1024))
    assert (status, body["code"], body["message"]) == (500, 500, "etcdserver: request is too large")
    assert "reason" not in body  # StatusReasonUnknown is "", left out of upstream's JSON
    assert raw(apiserver, "GET", f"{base}/big")[0] == 404
    # An update that grows an object past the limit is refused the same way; the stored one stays.
    status, small = raw(apiserver, "POST", base, _template("grows", 10))
    assert status == 201
    grown = {**_template("grows", 1600 * 1024), "metadata": small["metadata"]}
    status, body = raw(apiserver, "PUT", f"{base}/grows", grown)
    assert (status, body["message"]) == (500, "etcdserver: request is too large")
    status, kept = raw(apiserver, "GET", f"{base}/grows")
    assert status == 200 and kept["metadata"]["resourceVersion"] == small["metadata"]["resourceVersion"]
