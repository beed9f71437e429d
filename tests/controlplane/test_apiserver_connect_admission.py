"""CONNECT admission against the real API server, as upstream's ConnectResource runs it before
connecting: a validating webhook registered for CONNECT on pods/attach is sent the PodAttachOptions and
its refusal is the answer; a ValidatingAdmissionPolicy for CONNECT on pods/exec judges the
PodExecOptions; a subresource nothing is registered for goes on to the pod (which has no node here)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.test_apiserver_crd import wait_for
from tests.controlplane.webhookserver import serving

Obj = dict[str, Any]


def connect(api: client.ApiClient, namespace: str, path: str) -> tuple[int, Obj]:
    """POST a connect subresource (no upgrade: admission answers before any stream): (status, body)."""
    try:
        answer = api.call_api(
            "POST",
            f"{api.configuration.host}/api/v1/namespaces/{namespace}/pods/{path}",
            header_params={"Accept": "application/json"},
        )
    except ApiException as err:
        return err.status, json.loads(err.body)
    answer.read()
    return answer.status, json.loads(answer.data or b"{}")


def rule(subresource: str) -> Obj:
    return {"operations": ["CONNECT"], "apiGroups": [""], "apiVersions": ["v1"], "resources": [subresource]}


@pytest.fixture
def pod(api: client.ApiClient, namespace: str) -> str:
    body = {"metadata": {"name": "target"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    client.CoreV1Api(api).create_namespaced_pod(namespace, body)
    return "target"


def test_a_webhook_for_connect_on_attach_is_called(
    api: client.ApiClient, namespace: str, pod: str, tmp_path: Path
) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    name = f"connect-{uuid.uuid4().hex[:8]}"
    with serving(tmp_path) as server:
        webhook = {
            "name": "attach.example.com",
            "clientConfig": {"url": server.url("/refuse"), "caBundle": server.ca_bundle},
            "rules": [rule("pods/attach")],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }
        adm.create_validating_webhook_configuration({"metadata": {"name": name}, "webhooks": [webhook]})
        try:
            refused = connect(api, namespace, f"{pod}/attach?container=c&stdin=true&stdout=1")
            passed = connect(api, namespace, f"{pod}/exec?command=ls&stdout=true")
        finally:
            adm.delete_validating_webhook_configuration(name)
        reviews = server.got("/refuse")
    assert refused[0] == 403
    assert (
        refused[1]["message"]
        == 'admission webhook "attach.example.com" denied the request: connections are refused'
    )
    assert len(reviews) == 1
    review = reviews[0]
    assert review["operation"] == "CONNECT" and review["subResource"] == "attach"
    assert review["kind"] == {"group": "", "version": "v1", "kind": "PodAttachOptions"}
    assert review["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert review["name"] == pod and review["namespace"] == namespace
    assert review["object"] == {
        "kind": "PodAttachOptions",
        "apiVersion": "v1",
        "stdin": True,
        "stdout": True,
        "container": "c",
    }
    assert review["oldObject"] is None
    # exec matched no webhook: on to the pod, which no node runs in this test
    assert passed == (400, passed[1]) and passed[1]["message"] == f"pod {pod} does not have a host assigned"


def test_a_policy_for_connect_on_exec_judges_the_options(
    api: client.ApiClient, namespace: str, pod: str
) -> None:
    adm = client.AdmissionregistrationV1Api(api)
    name = f"connect-{uuid.uuid4().hex[:8]}"
    policy = {
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": [rule("pods/exec")]},
            "validations": [{"expression": "object.command[0] != 'rm'", "message": "no rm"}],
        },
    }
    binding = {
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    adm.create_validating_admission_policy(policy)
    adm.create_validating_admission_policy_binding(binding)
    try:
        wait_for(lambda: connect(api, namespace, f"{pod}/exec?command=rm&command=-rf&stdout=true")[0] == 422)
        code, status = connect(api, namespace, f"{pod}/exec?command=rm&command=-rf&stdout=true")
        allowed = connect(api, namespace, f"{pod}/exec?command=ls&stdout=true")
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)
    assert code == 422  # a validation without a reason is Invalid, as upstream's
    assert status["message"] == (
        f"pods \"{pod}\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}' denied request: no rm"
    )
    assert allowed[0] == 400 and allowed[1]["message"] == f"pod {pod} does not have a host assigned"
