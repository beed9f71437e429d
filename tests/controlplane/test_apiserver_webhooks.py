"""Admission webhooks against the real API server and a real HTTPS webhook run by the test (its own
CA, the caBundle in the configuration): validation and defaults of the configurations with upstream's
texts; a mutating webhook adds a label to pods and a validating one refuses some, while configmaps
(unmatched) and reads are untouched; the review's fields; failurePolicy Fail and Ignore with the webhook
down; garbage, a wrong uid, an undecodable and an inapplicable patch; a hanging webhook cut at
timeoutSeconds; reinvocation; dry run; warnings and the denial through kubectl; a Service reference
resolved through its Endpoints. Every configuration selects only its test's namespace."""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubeclient.hostaddr import default_route_ip
from tests.controlplane.conftest import Kubectl
from tests.controlplane.webhookserver import WebhookServer, serving

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def hook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookServer]:
    with serving(tmp_path_factory.mktemp("webhook")) as server:
        yield server


@pytest.fixture(scope="module")
def adm(api: client.ApiClient) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(api)


Make = Callable[..., str]


@pytest.fixture
def configs(adm: client.AdmissionregistrationV1Api) -> Iterator[Make]:
    """make(kind, *webhooks) creates a configuration (removed after the test); returns its name."""
    made: list[tuple[str, str]] = []

    def make(kind: str, *hooks: Obj, name: str = "") -> str:
        name = name or f"wh-{uuid.uuid4().hex[:8]}"
        body = {"metadata": {"name": name}, "webhooks": list(hooks)}
        if kind == "mutating":
            adm.create_mutating_webhook_configuration(body)
        else:
            adm.create_validating_webhook_configuration(body)
        made.append((kind, name))
        return name

    yield make
    for kind, name in made:
        if kind == "mutating":
            adm.delete_mutating_webhook_configuration(name)
        else:
            adm.delete_validating_webhook_configuration(name)


def hook(
    name: str, url: str, namespace: str, ca: str = "", resources: tuple[str, ...] = ("pods",), **extra: Any
) -> Obj:
    out: Obj = {
        "name": name,
        "clientConfig": {"url": url, **({"caBundle": ca} if ca else {})},
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": list(resources),
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
    }
    out.update(extra)
    return out


def pod(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def failure(err: pytest.ExceptionInfo[ApiException]) -> tuple[int, Obj]:
    return err.value.status, json.loads(err.value.body)


def post_raw(api: client.ApiClient, plural: str, body: Obj) -> tuple[int, Obj]:
    """POST past the client's own checks (it refuses a webhook without sideEffects itself)."""
    answer = api.call_api(
        "POST",
        f"{api.configuration.host}/apis/admissionregistration.k8s.io/v1/{plural}",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
    )
    answer.read()
    return answer.status, json.loads(answer.data)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the configurations --------------------------------------------------------------------------------


def test_defaults(configs: Make, adm: client.AdmissionregistrationV1Api, hook_server: WebhookServer) -> None:
    name = configs(
        "mutating",
        {
            "name": "defaults.example.com",
            "clientConfig": {"service": {"namespace": "default", "name": "svc"}},
            "rules": [
                {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
            ],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        },
    )
    got = adm.api_client.sanitize_for_serialization(adm.read_mutating_webhook_configuration(name))[
        "webhooks"
    ][0]
    assert got["failurePolicy"] == "Fail"
    assert got["matchPolicy"] == "Equivalent"
    assert got["reinvocationPolicy"] == "Never"
    assert got["timeoutSeconds"] == 10
    assert got["namespaceSelector"] == {} and got["objectSelector"] == {}
    assert got["rules"][0]["scope"] == "*"
    assert got["clientConfig"]["service"]["port"] == 443


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"name": "short"},
            'webhooks[0].name: Invalid value: "short": should be a domain with at least three segments separated by dots',
        ),
        (
            {"sideEffects": None},
            "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        ),
        (
            {"sideEffects": "Some"},
            'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"',
        ),
        (
            {"admissionReviewVersions": ["v2"]},
            'webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1',
        ),
        (
            {"timeoutSeconds": 31},
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        ),
        (
            {"clientConfig": {"url": "http://example.com/x"}},
            "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ),
        (
            {"clientConfig": {"url": "https://example.com/x?a=b"}},
            'webhooks[0].clientConfig.url: Invalid value: "a=b": query parameters are not permitted in the URL',
        ),
        (
            {"clientConfig": {"service": {"namespace": "ns", "name": "s", "path": "/x//y"}}},
            'webhooks[0].clientConfig.service.path: Invalid value: "/x//y": segment[1] may not be empty',
        ),
        (
            {"clientConfig": {"service": {"namespace": "ns", "name": "s", "path": "ab"}}},
            "webhooks[0].clientConfig.service.path: Invalid value: \"ab\": must start with a '/'",
        ),
        (
            {"admissionReviewVersions": ["v1", "v1"]},
            'webhooks[0].admissionReviewVersions[1]: Invalid value: "v1": duplicate version',
        ),
        (
            {"clientConfig": {}},
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required",
        ),
        (
            {"failurePolicy": "Maybe"},
            'webhooks[0].failurePolicy: Unsupported value: "Maybe": supported values: "Fail", "Ignore"',
        ),
        (
            {
                "rules": [
                    {"operations": ["EAT"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}
                ]
            },
            'webhooks[0].rules[0].operations[0]: Unsupported value: "EAT": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"',
        ),
    ],
)
def test_validation(api: client.ApiClient, change: Obj, expected: str) -> None:
    webhook = hook("valid.example.com", "https://127.0.0.1:1/x", "default")
    webhook.update(change)
    webhook = {k: v for k, v in webhook.items() if v is not None}
    code, status = post_raw(
        api, "validatingwebhookconfigurations", {"metadata": {"name": "bad"}, "webhooks": [webhook]}
    )
    assert code == 422, status
    assert (
        status["message"]
        == f'ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid: {expected}'
    )


def test_duplicate_names(api: client.ApiClient) -> None:
    one = hook("same.example.com", "https://127.0.0.1:1/x", "default")
    code, status = post_raw(
        api, "validatingwebhookconfigurations", {"metadata": {"name": "dup"}, "webhooks": [one, one]}
    )
    assert code == 422 and status["message"].endswith('webhooks[1].name: Duplicate value: "same.example.com"')


# --- calls -----------------------------------------------------------------------------------------------


def test_mutate_and_deny(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    configs("mutating", hook("label.example.com", hook_server.url("/mutate"), namespace, ca))
    configs("validating", hook("deny.example.com", hook_server.url("/deny"), namespace, ca))
    created = v1.create_namespaced_pod(namespace, pod("labelled", {"app": "a"}))
    assert created.metadata.labels == {"app": "a", "webhook": "seen"}
    assert v1.read_namespaced_pod("labelled", namespace).metadata.labels["webhook"] == "seen"
    sent = [r for r in hook_server.got("/mutate") if r.get("namespace") == namespace]
    assert len(sent) == 1
    review = sent[0]
    assert review["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert review["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    assert review["requestKind"] == review["kind"] and review["requestResource"] == review["resource"]
    assert review["operation"] == "CREATE" and review["name"] == "labelled"
    assert review["userInfo"] == {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    assert review["dryRun"] is False and review["options"]["kind"] == "CreateOptions"
    assert review["object"]["metadata"]["labels"] == {"app": "a"} and review["oldObject"] is None
    assert re.fullmatch(r"[0-9a-f-]{36}", review["uid"])
    # The validating webhook saw the mutated object.
    assert [
        r["object"]["metadata"]["labels"] for r in hook_server.got("/deny") if r.get("namespace") == namespace
    ] == [{"app": "a", "webhook": "seen"}]

    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("refused", {"deny": "yes"}))
    code, status = failure(err)
    assert code == 403
    assert (
        status["message"]
        == 'admission webhook "deny.example.com" denied the request: objects labelled deny=yes are refused'
    )
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("refused", namespace)
    assert err.value.status == 404

    # An update is reviewed with the old object too.
    v1.patch_namespaced_pod("labelled", namespace, {"metadata": {"annotations": {"x": "y"}}})
    update = [r for r in hook_server.got("/deny") if r.get("namespace") == namespace][-1]
    assert update["operation"] == "UPDATE" and update["oldObject"]["metadata"]["name"] == "labelled"
    assert update["options"]["kind"] == "UpdateOptions"

    # Unmatched resources and reads never reach a webhook.
    before = len(hook_server.reviews)
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "cm", "labels": {"deny": "yes"}}})
    v1.list_namespaced_pod(namespace)
    v1.read_namespaced_pod("labelled", namespace)
    assert len(hook_server.reviews) == before


def test_delete(configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "kept", "labels": {"deny": "yes"}}})
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "gone"}})
    deletes = hook(
        "deny-delete.example.com",
        hook_server.url("/deny"),
        namespace,
        hook_server.ca_bundle,
        resources=("configmaps",),
    )
    deletes["rules"][0]["operations"] = ["DELETE"]
    configs("validating", deletes)
    with pytest.raises(ApiException) as err:
        v1.delete_namespaced_config_map("kept", namespace)
    code, status = failure(err)
    assert code == 403 and status["message"].startswith(
        'admission webhook "deny-delete.example.com" denied the request'
    )
    assert v1.read_namespaced_config_map("kept", namespace).metadata.name == "kept"
    v1.delete_namespaced_config_map("gone", namespace)
    review = [r for r in hook_server.got("/deny") if r.get("namespace") == namespace and r["name"] == "gone"][
        -1
    ]
    assert review["operation"] == "DELETE" and review["object"] is None
    assert review["oldObject"]["metadata"]["name"] == "gone" and review["options"]["kind"] == "DeleteOptions"


def test_other_namespaces_unaffected(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    configs(
        "validating", hook("deny-ns.example.com", hook_server.url("/deny"), namespace, hook_server.ca_bundle)
    )
    other = f"t-{uuid.uuid4().hex[:8]}"
    v1.create_namespace({"metadata": {"name": other}})
    v1.create_namespaced_pod(other, pod("free", {"deny": "yes"}))


def test_object_selector(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    configs(
        "mutating",
        hook(
            "sel.example.com",
            hook_server.url("/mutate"),
            namespace,
            hook_server.ca_bundle,
            objectSelector={"matchLabels": {"inject": "yes"}},
        ),
    )
    assert v1.create_namespaced_pod(namespace, pod("plain", {"app": "a"})).metadata.labels == {"app": "a"}
    assert (
        v1.create_namespaced_pod(namespace, pod("picked", {"inject": "yes"})).metadata.labels["webhook"]
        == "seen"
    )


def test_webhook_down(configs: Make, v1: client.CoreV1Api, namespace: str) -> None:
    port = closed_port()
    url = f"https://127.0.0.1:{port}/hook"
    name = configs("validating", hook("down.example.com", url, namespace))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("blocked"))
    code, status = failure(err)
    assert code == 500 and status["reason"] == "InternalError"
    assert status["message"] == (
        'Internal error occurred: failed calling webhook "down.example.com": failed to call webhook: '
        f'Post "{url}?timeout=10s": dial tcp 127.0.0.1:{port}: connect: connection refused'
    )
    # Unmatched writes and reads go on.
    v1.create_namespaced_config_map(namespace, {"metadata": {"name": "fine"}})
    v1.list_namespaced_pod(namespace)
    adm = client.AdmissionregistrationV1Api(v1.api_client)
    adm.patch_validating_webhook_configuration(
        name, [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]
    )
    v1.create_namespaced_pod(namespace, pod("through"))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "/garbage",
            r'failed calling webhook "bad.example.com": failed to call webhook: couldn\'t get version/kind; json parse error: .+',
        ),
        (
            "/wronguid",
            r'failed calling webhook "bad.example.com": received invalid webhook response: expected response.uid="[0-9a-f-]{36}", got "not-the-uid"',
        ),
        (
            "/error",
            r'failed calling webhook "bad.example.com": failed to call webhook: an error on the server \("boom"\) has prevented the request from succeeding',
        ),
        (
            "/truncate",
            r'failed calling webhook "bad.example.com": failed to call webhook: Post "https://127\.0\.0\.1:\d+/truncate\?timeout=10s": unexpected EOF',
        ),
        (
            "/badpatch",
            r'failed calling webhook "bad.example.com": received undecodable patch in webhook response: json: cannot unmarshal object into Go value of type jsonpatch.Patch',
        ),
    ],
)
def test_bad_answers(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str, path: str, expected: str
) -> None:
    configs("mutating", hook("bad.example.com", hook_server.url(path), namespace, hook_server.ca_bundle))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p"))
    code, status = failure(err)
    assert code == 500
    assert re.fullmatch("Internal error occurred: " + expected, status["message"]), status["message"]


def test_inapplicable_patch(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    # A patch that decodes but does not apply is an internal error whatever the failurePolicy.
    configs(
        "mutating",
        hook(
            "badop.example.com",
            hook_server.url("/badop"),
            namespace,
            hook_server.ca_bundle,
            failurePolicy="Ignore",
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p"))
    code, status = failure(err)
    assert code == 500 and status["message"].startswith("Internal error occurred: ")
    assert "nothing" in status["message"]


def test_untrusted_certificate(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    url = hook_server.url("/deny")
    configs("validating", hook("noca.example.com", url, namespace))  # no caBundle: the system roots
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p"))
    assert failure(err)[1]["message"] == (
        'Internal error occurred: failed calling webhook "noca.example.com": failed to call webhook: '
        f'Post "{url}?timeout=10s": tls: failed to verify certificate: x509: certificate signed by unknown authority'
    )


def test_hanging_webhook_is_cut(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    url = hook_server.url("/hang")
    configs("validating", hook("hang.example.com", url, namespace, hook_server.ca_bundle, timeoutSeconds=1))
    start = time.monotonic()
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("p"))
    took = time.monotonic() - start
    assert failure(err)[1]["message"] == (
        'Internal error occurred: failed calling webhook "hang.example.com": failed to call webhook: '
        f'Post "{url}?timeout=1s": context deadline exceeded'
    )
    assert 1.0 <= took < 5.0


def test_reinvocation(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    configs(
        "mutating",
        hook("first.example.com", hook_server.url("/mutate"), namespace, ca, reinvocationPolicy="IfNeeded"),
        name=f"a-{namespace}",
    )
    configs(
        "mutating",
        hook("second.example.com", hook_server.url("/mutate-again"), namespace, ca),
        name=f"b-{namespace}",
    )
    created = v1.create_namespaced_pod(namespace, pod("twice", {"app": "a"}))
    assert created.metadata.labels == {"app": "a", "webhook": "seen", "again": "yes"}
    seen = [
        r["object"]["metadata"]["labels"]
        for r in hook_server.got("/mutate")
        if r.get("namespace") == namespace
    ]
    assert seen == [{"app": "a"}, {"app": "a", "webhook": "seen", "again": "yes"}]


def test_dry_run(configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str) -> None:
    configs(
        "mutating",
        hook(
            "dry.example.com",
            hook_server.url("/mutate"),
            namespace,
            hook_server.ca_bundle,
            sideEffects="NoneOnDryRun",
        ),
    )
    created = v1.create_namespaced_pod(namespace, pod("dry"), dry_run="All")
    assert created.metadata.labels == {"webhook": "seen"}
    sent = [r for r in hook_server.got("/mutate") if r.get("namespace") == namespace]
    assert sent[-1]["dryRun"] is True and sent[-1]["options"]["dryRun"] == ["All"]
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_pod("dry", namespace)
    assert err.value.status == 404


def test_kubectl_warning_and_denial(
    configs: Make, hook_server: WebhookServer, kubectl: Kubectl, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    configs(
        "validating",
        hook("warn.example.com", hook_server.url("/warn"), namespace, ca, resources=("configmaps",)),
    )
    configs(
        "validating",
        hook("deny-cm.example.com", hook_server.url("/deny"), namespace, ca, resources=("configmaps",)),
    )
    ok = kubectl.run("create", "configmap", "fine", "-n", namespace)
    assert "Warning: this webhook warns" in ok.stderr
    refused = kubectl.run("create", "configmap", "refused", "-n", namespace, "--dry-run=server", check=False)
    assert refused.returncode == 0  # no deny label: allowed, even on a dry run
    manifest = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "no", "labels": {"deny": "yes"}}}
    )
    denied = kubectl.run("create", "-n", namespace, "-f", "-", input=manifest, check=False)
    assert denied.returncode != 0
    assert (
        'admission webhook "deny-cm.example.com" denied the request: objects labelled deny=yes are refused'
        in denied.stderr
    )


# --- a Service reference --------------------------------------------------------------------------------


def test_service_reference(configs: Make, v1: client.CoreV1Api, namespace: str, tmp_path: Path) -> None:
    host = default_route_ip()
    if not host:
        pytest.skip("no non-loopback address for an Endpoints object")
    with serving(tmp_path, host=host, names=(f"hooksvc.{namespace}.svc",)) as server:
        v1.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": "hooksvc"},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": server.port}]},
            },
        )
        service_hook = hook("svc.example.com", "", namespace, resources=("pods",))
        service_hook["clientConfig"] = {
            "service": {"namespace": namespace, "name": "hooksvc", "path": "/mutate"},
            "caBundle": server.ca_bundle,
        }
        configs("mutating", service_hook)
        with pytest.raises(ApiException) as err:
            v1.create_namespaced_pod(namespace, pod("early"))
        assert failure(err)[1]["message"] == (
            'Internal error occurred: failed calling webhook "svc.example.com": failed to call webhook: '
            f'Post "https://hooksvc.{namespace}.svc:443/mutate?timeout=10s": endpoints "hooksvc" not found'
        )
        v1.create_namespaced_endpoints(
            namespace,
            {
                "metadata": {"name": "hooksvc"},
                "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": server.port}]}],
            },
        )
        assert v1.create_namespaced_pod(namespace, pod("via-service")).metadata.labels == {"webhook": "seen"}


def test_kubectl_columns_and_explain(
    configs: Make, hook_server: WebhookServer, kubectl: Kubectl, namespace: str
) -> None:
    name = configs(
        "validating",
        hook("one.example.com", hook_server.url("/deny"), namespace, hook_server.ca_bundle),
        hook("two.example.com", hook_server.url("/deny"), namespace, hook_server.ca_bundle),
    )
    table = kubectl("get", "validatingwebhookconfigurations", name).split("\n")
    assert table[0].split() == ["NAME", "WEBHOOKS", "AGE"]
    assert table[1].split()[:2] == [name, "2"]
    explained = kubectl("explain", "mutatingwebhookconfigurations.webhooks.reinvocationPolicy")
    assert "reinvocationPolicy" in explained and "IfNeeded" in explained


def test_match_conditions(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    only_labelled = [
        {
            "name": "labelled",
            "expression": "has(object.metadata.labels) && 'inject' in object.metadata.labels",
        }
    ]
    configs(
        "mutating",
        hook("cond.example.com", hook_server.url("/mutate"), namespace, ca, matchConditions=only_labelled),
    )
    assert v1.create_namespaced_pod(namespace, pod("skipped", {"app": "a"})).metadata.labels == {"app": "a"}
    assert (
        v1.create_namespaced_pod(namespace, pod("called", {"inject": "1"})).metadata.labels["webhook"]
        == "seen"
    )
    erring = [{"name": "broken", "expression": "object.spec.nothing == 'x'"}]
    configs(
        "validating",
        hook("cond-err.example.com", hook_server.url("/deny"), namespace, ca, matchConditions=erring),
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_pod(namespace, pod("refused"))
    code, status = failure(err)
    assert code == 403
    assert status["message"].startswith(
        "pods \"refused\" is forbidden: expression 'object.spec.nothing == 'x'' resulted in error: "
    )


def test_selectors_see_earlier_mutations(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    configs(
        "mutating", hook("adds.example.com", hook_server.url("/mutate"), namespace, ca), name=f"a-{namespace}"
    )
    configs(
        "mutating",
        hook(
            "follows.example.com",
            hook_server.url("/mutate-again"),
            namespace,
            ca,
            objectSelector={"matchLabels": {"webhook": "seen"}},
        ),
        name=f"b-{namespace}",
    )
    assert v1.create_namespaced_pod(namespace, pod("chained")).metadata.labels == {
        "webhook": "seen",
        "again": "yes",
    }


def test_patches_cannot_change_system_fields(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    ca = hook_server.ca_bundle
    configs(
        "mutating",
        hook("tamper.example.com", hook_server.url("/tamper"), namespace, ca, resources=("configmaps",)),
    )
    created = v1.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    assert created.metadata.uid != "not-a-real-uid" and re.fullmatch(r"[0-9a-f-]{36}", created.metadata.uid)
    configs(
        "mutating", hook("move.example.com", hook_server.url("/move"), namespace, ca, resources=("secrets",))
    )
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_secret(namespace, {"metadata": {"name": "s"}})
    code, status = failure(err)
    assert code == 400
    assert (
        status["message"]
        == "the namespace of the provided object does not match the namespace sent on the request"
    )


def _hpa_hook(name: str, server: WebhookServer, namespace: str, version: str, **extra: Any) -> Obj:
    out = hook(name, server.url("/mutate"), namespace, server.ca_bundle, **extra)
    out["rules"] = [
        {
            "operations": ["CREATE"],
            "apiGroups": ["autoscaling"],
            "apiVersions": [version],
            "resources": ["horizontalpodautoscalers"],
        }
    ]
    return out


def test_match_policy(
    configs: Make, hook_server: WebhookServer, api: client.ApiClient, namespace: str
) -> None:
    """A webhook for autoscaling/v2 sees an autoscaling/v1 request in v2 under Equivalent (and its
    patch lands), not under Exact; one for v1 sees the v1 object, converted from the stored v2."""
    configs("mutating", _hpa_hook("hpa-v2.example.com", hook_server, namespace, "v2"), name=f"a-{namespace}")
    configs(
        "mutating",
        _hpa_hook("hpa-v2-exact.example.com", hook_server, namespace, "v2", matchPolicy="Exact"),
        name=f"b-{namespace}",
    )
    configs("mutating", _hpa_hook("hpa-v1.example.com", hook_server, namespace, "v1"), name=f"c-{namespace}")
    body = {
        "metadata": {"name": "h"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "maxReplicas": 3,
            "targetCPUUtilizationPercentage": 50,
        },
    }
    created = client.AutoscalingV1Api(api).create_namespaced_horizontal_pod_autoscaler(namespace, body)
    assert created.metadata.labels == {"webhook": "seen"}
    seen = [r for r in hook_server.got("/mutate") if r.get("namespace") == namespace]
    assert len(seen) == 2  # the Exact one was not called
    v2, v1 = seen
    assert v2["kind"] == {"group": "autoscaling", "version": "v2", "kind": "HorizontalPodAutoscaler"}
    assert v2["requestKind"] == {"group": "autoscaling", "version": "v1", "kind": "HorizontalPodAutoscaler"}
    assert v2["resource"]["version"] == "v2" and v2["requestResource"]["version"] == "v1"
    assert v2["object"]["apiVersion"] == "autoscaling/v2" and "metrics" in v2["object"]["spec"]
    assert v1["kind"]["version"] == "v1" and v1["requestKind"] == v1["kind"]
    assert v1["object"]["apiVersion"] == "autoscaling/v1"
    assert v1["object"]["spec"]["targetCPUUtilizationPercentage"] == 50
    assert v1["object"]["metadata"]["labels"] == {"webhook": "seen"}  # the v2 webhook's patch, converted


def test_kubectl_apply(kubectl: Kubectl, adm: client.AdmissionregistrationV1Api, namespace: str) -> None:
    name = f"applied-{namespace}"

    def manifest(timeout: int) -> str:
        webhook = hook("applied.example.com", "https://127.0.0.1:1/x", namespace, timeoutSeconds=timeout)
        return json.dumps(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": name},
                "webhooks": [webhook],
            }
        )

    try:
        assert "created" in kubectl("apply", "-f", "-", input=manifest(5))
        assert "configured" in kubectl("apply", "-f", "-", input=manifest(7))
        assert adm.read_validating_webhook_configuration(name).webhooks[0].timeout_seconds == 7
        assert "serverside-applied" in kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=manifest(9)
        )
        assert adm.read_validating_webhook_configuration(name).webhooks[0].timeout_seconds == 9
    finally:
        kubectl("delete", "validatingwebhookconfiguration", name, "--ignore-not-found")


def test_namespace_judged_by_its_own_labels(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api
) -> None:
    team = uuid.uuid4().hex[:8]
    webhook = hook(
        "ns.example.com", hook_server.url("/deny"), "unused", hook_server.ca_bundle, resources=("namespaces",)
    )
    webhook["namespaceSelector"] = {"matchLabels": {"team": team}}
    webhook["rules"][0]["operations"] = ["CREATE"]
    configs("validating", webhook)
    with pytest.raises(ApiException) as err:
        v1.create_namespace({"metadata": {"name": f"t-{team}-a", "labels": {"team": team, "deny": "yes"}}})
    assert failure(err)[1]["message"].startswith('admission webhook "ns.example.com" denied the request')
    v1.create_namespace({"metadata": {"name": f"t-{team}-b", "labels": {"deny": "yes"}}})  # not selected
    reviews = [r for r in hook_server.got("/deny") if r["resource"]["resource"] == "namespaces"]
    assert [r["name"] for r in reviews if r["name"].startswith(f"t-{team}")] == [f"t-{team}-a"]


def test_create_as_sent(
    configs: Make, hook_server: WebhookServer, v1: client.CoreV1Api, namespace: str
) -> None:
    """Mutating webhooks see a create before the store names and stamps it (upstream's order);
    validating webhooks see the object as it will be stored."""
    ca = hook_server.ca_bundle
    configs("mutating", hook("sent.example.com", hook_server.url("/mutate"), namespace, ca))
    configs("validating", hook("stored.example.com", hook_server.url("/deny"), namespace, ca))
    created = v1.create_namespaced_pod(namespace, {**pod(""), "metadata": {"generateName": "gen-"}})
    assert created.metadata.name.startswith("gen-") and created.metadata.labels == {"webhook": "seen"}
    mutating = [r for r in hook_server.got("/mutate") if r.get("namespace") == namespace][-1]
    assert mutating["name"] == ""
    meta = mutating["object"]["metadata"]
    assert meta["generateName"] == "gen-" and not {"name", "uid", "creationTimestamp"} & set(meta)
    validating = [r for r in hook_server.got("/deny") if r.get("namespace") == namespace][-1]
    assert validating["name"] == created.metadata.name
    assert validating["object"]["metadata"]["uid"] == created.metadata.uid
