"""ValidatingAdmissionPolicy and its bindings against the real API server: validation with upstream's
texts; a policy bound with Deny refuses with upstream's message, reason and code; Warn answers with a
warning header (kubectl prints it); params from a ConfigMap by name, with parameterNotFoundAction Deny
and Allow; messageExpression, variables, oldObject and request in CEL; failurePolicy on an expression
error; kubectl's columns and its printing of a denial. Every binding selects only its test's namespace."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl

Obj = dict[str, Any]
BASE = "/apis/admissionregistration.k8s.io/v1"


def call(api: client.ApiClient, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
    answer = api.call_api(
        method,
        f"{api.configuration.host}{path}",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
    )
    answer.read()
    return answer.status, json.loads(answer.data)


Make = Callable[..., str]


@pytest.fixture
def make(api: client.ApiClient) -> Iterator[Make]:
    """make(plural, spec) creates a policy or binding (removed after the test); returns its name."""
    made: list[tuple[str, str]] = []

    def create(plural: str, spec: Obj, name: str = "") -> str:
        name = name or f"p-{uuid.uuid4().hex[:8]}"
        status, body = call(api, "POST", f"{BASE}/{plural}", {"metadata": {"name": name}, "spec": spec})
        assert status == 201, body
        made.append((plural, name))
        return name

    yield create
    for plural, name in reversed(made):
        call(api, "DELETE", f"{BASE}/{plural}/{name}")


def rules(*resources: str, operations: tuple[str, ...] = ("CREATE", "UPDATE")) -> Obj:
    return {
        "resourceRules": [
            {
                "operations": list(operations),
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": list(resources),
            }
        ]
    }


def in_namespace(namespace: str) -> Obj:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}


def bind(make: Make, policy: str, namespace: str, actions: tuple[str, ...] = ("Deny",), **extra: Any) -> str:
    return make(
        "validatingadmissionpolicybindings",
        {
            "policyName": policy,
            "validationActions": list(actions),
            "matchResources": in_namespace(namespace),
            **extra,
        },
    )


def refusal(err: pytest.ExceptionInfo[ApiException]) -> tuple[int, Obj]:
    return err.value.status, json.loads(err.value.body)


# --- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("plural", "spec", "expected"),
    [
        (
            "validatingadmissionpolicies",
            {"validations": [{"expression": "true"}]},
            "spec.matchConstraints: Required value",
        ),
        (
            "validatingadmissionpolicies",
            {"matchConstraints": rules("pods")},
            "[spec.validations: Required value: validations or auditAnnotations must contain at least one item, "
            "spec.auditAnnotations: Required value: validations or auditAnnotations must contain at least one item]",
        ),
        (
            "validatingadmissionpolicies",
            {"matchConstraints": rules("pods"), "validations": [{"expression": "true", "reason": "Teapot"}]},
            'spec.validations[0].reason: Unsupported value: "Teapot": supported values: "Forbidden", "Invalid", "RequestEntityTooLarge"',
        ),
        (
            "validatingadmissionpolicybindings",
            {"policyName": "x"},
            "spec.validationActions: Required value: at least one validation action is required",
        ),
        (
            "validatingadmissionpolicybindings",
            {"policyName": "x", "validationActions": ["Deny", "Warn"]},
            'spec.validationActions: Invalid value: ["Deny","Warn"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)',
        ),
        (
            "validatingadmissionpolicybindings",
            {"validationActions": ["Deny"]},
            "spec.policyName: Required value",
        ),
        (
            "validatingadmissionpolicybindings",
            {
                "policyName": "x",
                "validationActions": ["Deny"],
                "paramRef": {"name": "a", "selector": {}, "parameterNotFoundAction": "Deny"},
            },
            "[spec.paramRef.name: Forbidden: name and selector are mutually exclusive, "
            "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive]",
        ),
        (
            "validatingadmissionpolicybindings",
            {"policyName": "x", "validationActions": ["Deny"], "paramRef": {"name": "a"}},
            "spec.paramRef.parameterNotFoundAction: Required value",
        ),
        (
            "validatingadmissionpolicies",
            {
                "matchConstraints": rules("pods"),
                "variables": [{"name": "1x", "expression": "1"}],
                "validations": [{"expression": " "}],
            },
            '[spec.variables[0].name: Invalid value: "1x": name is not a valid CEL identifier, '
            "spec.validations[0].expression: Required value: expression is not specified]",
        ),
    ],
)
def test_validation(api: client.ApiClient, plural: str, spec: Obj, expected: str) -> None:
    status, body = call(api, "POST", f"{BASE}/{plural}", {"metadata": {"name": "bad"}, "spec": spec})
    kind = "ValidatingAdmissionPolicy" if plural.endswith("policies") else "ValidatingAdmissionPolicyBinding"
    assert status == 422, body
    assert body["message"] == f'{kind}.admissionregistration.k8s.io "bad" is invalid: {expected}'


def test_expression_must_compile(api: client.ApiClient) -> None:
    spec = {"matchConstraints": rules("pods"), "validations": [{"expression": "object.metadata.name =="}]}
    status, body = call(
        api, "POST", f"{BASE}/validatingadmissionpolicies", {"metadata": {"name": "bad"}, "spec": spec}
    )
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.validations[0].expression"
    assert "compilation failed" in body["message"]


def test_defaults(make: Make, api: client.ApiClient) -> None:
    name = make(
        "validatingadmissionpolicies",
        {"matchConstraints": rules("pods"), "validations": [{"expression": "true"}]},
    )
    _, got = call(api, "GET", f"{BASE}/validatingadmissionpolicies/{name}")
    assert got["spec"]["failurePolicy"] == "Fail"
    match = got["spec"]["matchConstraints"]
    assert (
        match["matchPolicy"] == "Equivalent"
        and match["namespaceSelector"] == {}
        and match["objectSelector"] == {}
    )
    assert match["resourceRules"][0]["scope"] == "*"
    assert got["metadata"]["generation"] == 1
    # The status is the status subresource's: an update of the object leaves it, a status update writes it.
    got["status"] = {"observedGeneration": 7}
    status, after = call(api, "PUT", f"{BASE}/validatingadmissionpolicies/{name}", got)
    assert status == 200 and after.get("status") == {}
    status, after = call(
        api,
        "PUT",
        f"{BASE}/validatingadmissionpolicies/{name}/status",
        after | {"status": {"observedGeneration": 1}},
    )
    assert status == 200 and after["status"] == {"observedGeneration": 1}


# --- evaluation ----------------------------------------------------------------------------------------


def test_deny(make: Make, v1: client.CoreV1Api, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "matchConstraints": rules("configmaps"),
            "validations": [
                {"expression": "object.metadata.name.startsWith('ok-')", "message": "names start with ok-"},
                {"expression": "!has(object.data) || size(object.data) < 3", "reason": "Forbidden"},
            ],
        },
    )
    binding = bind(make, policy, namespace)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "ok-1"}})
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "bad"}})
    code, status = refusal(err)
    text = (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: names start with ok-"
    )
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"] == f'configmaps "bad" is forbidden: {text}'
    assert status["details"]["causes"] == [{"message": text}]
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(
            namespace, {"metadata": {"name": "ok-2"}, "data": {"a": "1", "b": "2", "c": "3"}}
        )
    code, status = refusal(err)
    assert (code, status["reason"]) == (403, "Forbidden")
    assert status["message"].endswith(
        "denied request: failed expression: !has(object.data) || size(object.data) < 3"
    )
    # Other kinds and other namespaces are not judged.
    v1.create_namespaced_secret(namespace, {"metadata": {"name": "bad"}})
    other = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": other}})
    v1.create_namespaced_config_map(other, {"metadata": {"name": "bad"}})


def test_old_object_request_and_variables(make: Make, v1: client.CoreV1Api, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "matchConstraints": rules("configmaps"),
            "variables": [{"name": "version", "expression": "int(object.data.version)"}],
            "validations": [
                {
                    "expression": "request.operation != 'UPDATE' || variables.version > int(oldObject.data.version)",
                    "messageExpression": "'version must grow past ' + oldObject.data.version",
                }
            ],
        },
    )
    bind(make, policy, namespace)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "v"}, "data": {"version": "2"}})
    v1.patch_namespaced_config_map("v", namespace, {"data": {"version": "3"}})
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_config_map("v", namespace, {"data": {"version": "1"}})
    assert refusal(err)[1]["message"].endswith("denied request: version must grow past 3")


def test_delete(make: Make, v1: client.CoreV1Api, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "matchConstraints": rules("configmaps", operations=("DELETE",)),
            "validations": [
                {"expression": "object == null && oldObject.metadata.name != 'keep'", "message": "keep stays"}
            ],
        },
    )
    bind(make, policy, namespace)
    for name in ("keep", "drop"):
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_config_map("keep", namespace)
    assert refusal(err)[1]["message"].endswith("denied request: keep stays")
    v1.delete_namespaced_config_map("drop", namespace)
    with pytest.raises(ApiException) as err:  # a collection delete reviews each object
        v1.delete_collection_namespaced_config_map(namespace)
    assert refusal(err)[1]["message"].endswith("denied request: keep stays")


def test_params(make: Make, v1: client.CoreV1Api, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                **rules("configmaps"),
                "objectSelector": {"matchLabels": {"checked": "yes"}},
            },
            "validations": [
                {
                    "expression": "size(object.data) <= int(params.data.maxKeys)",
                    "messageExpression": "'at most ' + params.data.maxKeys + ' keys'",
                }
            ],
        },
    )
    ref = {"name": "limits", "namespace": namespace, "parameterNotFoundAction": "Deny"}
    binding = bind(make, policy, namespace, paramRef=ref)
    body = {"metadata": {"name": "c", "labels": {"checked": "yes"}}, "data": {"a": "1", "b": "2"}}
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, body)
    assert refusal(err)[1]["message"] == (
        f"configmaps \"c\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: "
        "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    )
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "limits"}, "data": {"maxKeys": "1"}})
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, body)
    assert refusal(err)[1]["message"].endswith("denied request: at most 1 keys")
    v1.patch_namespaced_config_map("limits", namespace, {"data": {"maxKeys": "2"}})
    v1.create_namespaced_config_map(namespace, body)


def test_params_not_found_allow(make: Make, v1: client.CoreV1Api, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": rules("secrets"),
            "validations": [{"expression": "false"}],
        },
    )
    bind(make, policy, namespace, paramRef={"name": "absent", "parameterNotFoundAction": "Allow"})
    v1.create_namespaced_secret(namespace, {"metadata": {"name": "s"}})


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_expression_error(make: Make, v1: client.CoreV1Api, namespace: str, failure_policy: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "failurePolicy": failure_policy,
            "matchConstraints": rules("configmaps"),
            "validations": [{"expression": "object.data.missing == 'x'"}],
        },
    )
    bind(make, policy, namespace)
    if failure_policy == "Ignore":
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "b"}})
        return
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}, "data": {"a": "b"}})
    assert (
        "denied request: expression 'object.data.missing == 'x'' resulted in error: "
        in refusal(err)[1]["message"]
    )


def test_warn_and_kubectl(make: Make, kubectl: Kubectl, namespace: str) -> None:
    policy = make(
        "validatingadmissionpolicies",
        {
            "matchConstraints": rules("configmaps"),
            "validations": [{"expression": "false", "message": "not quite"}],
        },
    )
    warn = bind(make, policy, namespace, actions=("Warn", "Audit"))
    out = kubectl.run("create", "configmap", "warned", "-n", namespace)
    assert (
        f"Warning: Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{warn}': not quite"
        in out.stderr
    )
    deny = bind(make, policy, namespace)
    refused = kubectl.run("create", "configmap", "refused", "-n", namespace, check=False)
    assert refused.returncode != 0
    assert (
        f"ValidatingAdmissionPolicy '{policy}' with binding '{deny}' denied request: not quite"
        in refused.stderr
    )
    table = kubectl("get", "validatingadmissionpolicies", policy)
    assert table.split("\n")[0].split() == ["NAME", "VALIDATIONS", "PARAMKIND", "AGE"]
    assert table.split("\n")[1].split()[:3] == [policy, "1", "<unset>"]
    table = kubectl("get", "validatingadmissionpolicybindings", deny)
    assert table.split("\n")[0].split() == ["NAME", "POLICYNAME", "PARAMREF", "AGE"]
    assert table.split("\n")[1].split()[:3] == [deny, policy, "<unset>"]
