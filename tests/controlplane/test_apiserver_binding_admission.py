"""Admission of a Binding against the real API server, as upstream's create handler runs it: a POST to
pods/{name}/binding is a CREATE of pods subresource binding whose object is the Binding (kind Binding,
no oldObject). A validating webhook on pods/binding CREATE refuses it (the pod stays unbound); a policy
on pod UPDATEs is not asked; a mutating webhook's annotation on the Binding lands on the pod."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.rawapi import call
from tests.controlplane.test_apiserver_crd import wait_for
from tests.controlplane.webhookserver import serving

pytestmark = pytest.mark.integration

Obj = dict[str, Any]


def post_binding(
    api: client.ApiClient, namespace: str, pod: str, node: str, query: str = ""
) -> tuple[int, Obj]:
    """POST a Binding as the scheduler does (`query`: e.g. "?dryRun=All"): (status, the answer's body)."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return call(api, "POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding{query}", body)


def rule(operation: str, *resources: str) -> Obj:
    return {"operations": [operation], "apiGroups": [""], "apiVersions": ["v1"], "resources": list(resources)}


def in_namespace(namespace: str) -> Obj:
    return {"matchLabels": {"kubernetes.io/metadata.name": namespace}}


@pytest.fixture
def pod(v1: client.CoreV1Api, namespace: str) -> str:
    name = f"p-{uuid.uuid4().hex[:6]}"
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    v1.create_namespaced_pod(namespace, body)
    return name


@pytest.fixture
def adm(api: client.ApiClient) -> Iterator[client.AdmissionregistrationV1Api]:
    """The admissionregistration API; the webhook configurations and policies a test names `b-...`
    are removed after it."""
    adm = client.AdmissionregistrationV1Api(api)
    yield adm
    for item in adm.list_validating_webhook_configuration().items:
        if item.metadata.name.startswith("b-"):
            adm.delete_validating_webhook_configuration(item.metadata.name)
    for item in adm.list_mutating_webhook_configuration().items:
        if item.metadata.name.startswith("b-"):
            adm.delete_mutating_webhook_configuration(item.metadata.name)
    for item in adm.list_validating_admission_policy_binding().items:
        if item.metadata.name.startswith("b-"):
            adm.delete_validating_admission_policy_binding(item.metadata.name)
    for item in adm.list_validating_admission_policy().items:
        if item.metadata.name.startswith("b-"):
            adm.delete_validating_admission_policy(item.metadata.name)


def webhook(url: str, ca_bundle: str, namespace: str, rules: list[Obj]) -> Obj:
    return {
        "name": "binding.example.com",
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": rules,
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": in_namespace(namespace),
    }


def bind_under_webhook(
    api: client.ApiClient, create: Callable[[Obj], Any], namespace: str, pod: str, tmp_path: Path, path: str
) -> tuple[int, Obj, list[Obj]]:
    """Bind `pod` to n1 with one webhook configuration (made by `create`, validating or mutating) sending
    pods/binding CREATEs to the test server's `path`: (status, the answer's body, the reviews it got)."""
    with serving(tmp_path) as server:
        hook = webhook(server.url(path), server.ca_bundle, namespace, [rule("CREATE", "pods/binding")])
        create({"metadata": {"name": f"b-{uuid.uuid4().hex[:8]}"}, "webhooks": [hook]})
        code, status = post_binding(api, namespace, pod, "n1")
        return code, status, server.got(path)


def test_a_validating_webhook_on_binding_create_refuses_the_binding(
    api: client.ApiClient,
    v1: client.CoreV1Api,
    adm: client.AdmissionregistrationV1Api,
    namespace: str,
    pod: str,
    tmp_path: Path,
) -> None:
    create = adm.create_validating_webhook_configuration
    code, status, reviews = bind_under_webhook(api, create, namespace, pod, tmp_path, "/refuse")
    assert code == 403, status
    assert (
        status["message"]
        == 'admission webhook "binding.example.com" denied the request: connections are refused'
    )
    assert v1.read_namespaced_pod(pod, namespace).spec.node_name is None
    assert len(reviews) == 1
    review = reviews[0]
    assert review["operation"] == "CREATE" and review["subResource"] == "binding"
    assert review["kind"] == {"group": "", "version": "v1", "kind": "Binding"}
    assert review["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert review["name"] == pod and review["namespace"] == namespace
    assert review["object"]["kind"] == "Binding"
    assert review["object"]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert review["oldObject"] is None


def test_policies_see_a_binding_as_a_create_never_as_a_pod_update(
    api: client.ApiClient,
    v1: client.CoreV1Api,
    adm: client.AdmissionregistrationV1Api,
    namespace: str,
    pod: str,
) -> None:
    on_binding, on_update = f"b-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    policies = {
        on_binding: (
            rule("CREATE", "pods/binding"),
            {"expression": "object.target.name != 'forbidden'", "message": "not onto forbidden"},
        ),
        # every UPDATE of a pod or any of its subresources: a binding is none of them
        on_update: (rule("UPDATE", "pods", "pods/*"), {"expression": "false", "message": "no pod updates"}),
    }
    for name, (match, validation) in policies.items():
        adm.create_validating_admission_policy(
            {
                "metadata": {"name": name},
                "spec": {"matchConstraints": {"resourceRules": [match]}, "validations": [validation]},
            }
        )
        adm.create_validating_admission_policy_binding(
            {
                "metadata": {"name": name},
                "spec": {
                    "policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": in_namespace(namespace)},
                },
            }
        )
    wait_for(lambda: post_binding(api, namespace, pod, "forbidden")[0] == 422)
    code, status = post_binding(api, namespace, pod, "forbidden")
    assert code == 422
    assert status["message"] == (
        f"pods \"{pod}\" is forbidden: ValidatingAdmissionPolicy '{on_binding}' with binding "
        f"'{on_binding}' denied request: not onto forbidden"
    )
    assert v1.read_namespaced_pod(pod, namespace).spec.node_name is None
    code, status = post_binding(api, namespace, pod, "n1")
    assert code == 201, status
    assert v1.read_namespaced_pod(pod, namespace).spec.node_name == "n1"
    # the update policy is in force: a pod update is refused by it
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_pod(pod, namespace, {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 422
    assert f"ValidatingAdmissionPolicy '{on_update}'" in json.loads(err.value.body)["message"]


def test_a_mutating_webhooks_annotation_on_the_binding_lands_on_the_pod(
    api: client.ApiClient,
    v1: client.CoreV1Api,
    adm: client.AdmissionregistrationV1Api,
    namespace: str,
    pod: str,
    tmp_path: Path,
) -> None:
    create = adm.create_mutating_webhook_configuration
    code, status, reviews = bind_under_webhook(api, create, namespace, pod, tmp_path, "/annotate")
    assert code == 201, status
    assert [(r["operation"], r["kind"]["kind"], r["oldObject"]) for r in reviews] == [
        ("CREATE", "Binding", None)
    ]
    got = v1.read_namespaced_pod(pod, namespace)
    assert got.spec.node_name == "n1"
    assert got.metadata.annotations == {"webhook": "seen"}


def test_a_dry_run_binding_answers_success_and_leaves_the_pod_unbound(
    api: client.ApiClient, v1: client.CoreV1Api, namespace: str, pod: str
) -> None:
    """Upstream's BindingREST hands dryRun to the pod's conditional update: the checks run, nothing is
    written, and the answer is the same Success."""
    code, status = post_binding(api, namespace, pod, "n1", "?dryRun=All")
    assert (code, status["status"]) == (201, "Success"), status
    assert v1.read_namespaced_pod(pod, namespace).spec.node_name is None
    code, status = post_binding(api, namespace, pod, "n1")
    assert code == 201, status
    assert v1.read_namespaced_pod(pod, namespace).spec.node_name == "n1"
