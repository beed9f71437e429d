"""The type-table walk and the body formats, without a server: upstream's messages, canonical forms,
null handling, unknown fields, and the limits on YAML and nesting."""

from __future__ import annotations

import pytest

from controlplane.apiserver import decoding, typed, valuestructs
from controlplane.apiserver.errors import ApiError


def _error(obj: dict, root: str) -> str:
    with pytest.raises(typed.DecodeError) as err:
        typed.decode(obj, root)
    return str(err.value)


def test_type_errors_name_the_go_struct_field_path_and_type() -> None:
    assert _error({"spec": {"containers": [{"name": "c", "args": ["a", 1]}]}}, "V1Pod") == (
        "json: cannot unmarshal number into Go struct field Container.spec.containers.args of type string"
    )
    assert _error({"spec": {"containers": {"name": "c"}}}, "V1Pod") == (
        "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container"
    )
    assert _error(
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": True}]}]}}
            }
        },
        "V1Deployment",
    ) == (
        "json: cannot unmarshal bool into Go struct field EnvVar.spec.template.spec.containers.env.value of type string"
    )
    assert _error({"metadata": {"labels": {"a": 1}}}, "V1ConfigMap") == (
        "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string"
    )
    assert _error({"spec": {"terminationGracePeriodSeconds": 2**63}}, "V1Pod") == (
        "json: cannot unmarshal number 9223372036854775808 into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64"
    )
    assert _error({"spec": {"strategy": {"rollingUpdate": {"maxSurge": [1]}}}}, "V1Deployment") == (
        "json: cannot unmarshal array into Go struct field RollingUpdateDeployment.spec.strategy.rollingUpdate.maxSurge of type int32"
    )


def test_quantities_times_and_bytes() -> None:
    pod = {
        "spec": {
            "overhead": {"cpu": 0.25},
            "containers": [
                {
                    "name": "c",
                    "resources": {"limits": {"memory": "1.5Gi", "cpu": "1000m"}, "requests": {"cpu": 2}},
                }
            ],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "2048Mi"}}],
        }
    }
    typed.decode(pod, "V1Pod")
    assert pod["spec"]["containers"][0]["resources"] == {
        "limits": {"memory": "1536Mi", "cpu": "1"},
        "requests": {"cpu": "2"},
    }
    assert (
        pod["spec"]["overhead"] == {"cpu": "250m"}
        and pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"] == "2Gi"
    )
    assert _error({"spec": {"overhead": {"cpu": "1mi"}}}, "V1Pod") == "unable to parse quantity's suffix"
    lease = {
        "spec": {"renewTime": "2030-01-02T03:04:05Z", "acquireTime": "2030-01-02T00:00:00.123456789-01:30"}
    }
    typed.decode(lease, "V1Lease")
    assert lease["spec"] == {
        "renewTime": "2030-01-02T03:04:05.000000Z",
        "acquireTime": "2030-01-02T01:30:00.123456Z",
    }
    event = {"lastTimestamp": "2030-01-02T03:04:05.9+00:00", "involvedObject": {}}
    typed.decode(event, "CoreV1Event")
    assert event["lastTimestamp"] == "2030-01-02T03:04:05Z"
    assert (
        _error({"lastTimestamp": "2030-02-30T00:00:00Z"}, "CoreV1Event")
        == 'parsing time "2030-02-30T00:00:00Z": day out of range'
    )
    assert _error({"lastTimestamp": "2030-01-02 03:04:05Z"}, "CoreV1Event") == (
        'parsing time "2030-01-02 03:04:05Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 03:04:05Z" as "T"'
    )
    assert _error({"data": {"k": "YQ"}}, "V1Secret") == "illegal base64 data at input byte 0"


def test_nulls_unknown_fields_and_required_zero_values() -> None:
    pod = {
        "metadata": None,
        "spec": {"containers": [None, {"name": "c", "bogus": 1}], "nodeSelector": {"a": None}},
        "status": {"conditions": [{"type": "Ready", "lastProbeTime": None}]},
    }
    unknown = typed.decode(pod, "V1Pod")
    assert unknown == ["spec.containers[1].bogus"]
    assert "metadata" not in pod and pod["spec"]["containers"] == [{}, {"name": "c"}]
    assert (
        pod["spec"]["nodeSelector"] == {"a": ""} and pod["status"]["conditions"][0]["lastProbeTime"] is None
    )
    kept = {"spec": {"bogus": 1}}
    assert typed.decode(kept, "V1Pod", prune=False) == ["spec.bogus"] and kept == {"spec": {"bogus": 1}}
    status = {"status": {"containerStatuses": [{"name": "c"}]}}
    typed.fill_required(status, "V1Pod")
    assert status["status"]["containerStatuses"][0] == {
        "name": "c",
        "image": "",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {},
        "lastState": {},
    }
    assert status["spec"] == {}


def test_struct_fields_go_always_writes_are_filled_in_empty_at_every_depth() -> None:
    node: dict = {"metadata": {"name": "n"}}
    typed.fill_required(node, "V1Node")
    assert node["spec"] == {}
    assert node["status"] == {
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": dict.fromkeys(
            (
                "architecture",
                "bootID",
                "containerRuntimeVersion",
                "kernelVersion",
                "kubeProxyVersion",
                "kubeletVersion",
                "machineID",
                "operatingSystem",
                "osImage",
                "systemUUID",
            ),
            "",
        ),
    }
    template = {
        "spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "b", "resources": {"x": 1}}]}}}
    }
    typed.fill_required(template, "V1Deployment")
    assert template["status"] == {} and template["spec"]["strategy"] == {}
    assert template["spec"]["template"]["metadata"] == {}
    assert [c["resources"] for c in template["spec"]["template"]["spec"]["containers"]] == [{}, {"x": 1}]
    # pointers stay unset: a pod's securityContext, a container's probes
    assert "securityContext" not in template["spec"]["template"]["spec"]
    assert "livenessProbe" not in template["spec"]["template"]["spec"]["containers"][0]


def test_the_value_struct_table_names_struct_fields_of_known_types() -> None:
    types = typed.table().types
    for name, fields in valuestructs.VALUE_STRUCTS.items():
        assert name in types, name
        for field in fields:
            assert types[name].fields[field].code == typed.STRUCT, (name, field)
            assert field in types[name].structs


def _body(raw: bytes, content_type: str = "application/json") -> object:
    return decoding.decode(raw, content_type)


def test_body_formats_refuse_what_go_refuses() -> None:
    for raw in (b'{"a": NaN}', b'{"a": 1e999}', b"\xff", b'{"a": ' + b"1" * 5000 + b"}"):
        with pytest.raises(ApiError) as err:
            _body(raw)
        assert err.value.code == 400
    assert _body(b'{"a": "\\ud800x"}') == {"a": "\ufffdx"}
    assert _body(b"a: 2024-01-02\nb: 80.0\n1: true\n", "application/yaml") == {
        "a": "2024-01-02",
        "b": 80,
        "1": True,
    }
    for raw in (b"a: .nan", b"a: !!binary aGk=", b"- &x [*x]"):
        with pytest.raises(ApiError) as err:
            _body(raw, "application/yaml")
        assert err.value.code == 400
    nested = b"[" * (decoding.MAX_DEPTH + 1) + b"]" * (decoding.MAX_DEPTH + 1)
    with pytest.raises(ApiError) as err:
        _body(nested)
    assert (
        err.value.message
        == "couldn't get version/kind; json parse error: invalid character '[' exceeded max depth"
    )
    assert _body(b"[" * decoding.MAX_DEPTH + b"]" * decoding.MAX_DEPTH) is not None
