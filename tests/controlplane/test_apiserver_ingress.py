"""networking.k8s.io/v1 Ingress and IngressClass against the real server: upstream's 422 texts,
defaults (parameters scope), the immutable controller, generation, the status subresource, the
DefaultIngressClass admission plugin, kubectl's columns and `kubectl create ingress`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message
from tests.controlplane.test_apiserver_crd import raw

pytestmark = pytest.mark.integration


def ingress(name: str, **spec: object) -> dict:
    body: dict = {"metadata": {"name": name}, "spec": {}}
    body["spec"].update(spec)
    return body


def rule(
    host: str, path: str = "/", path_type: str = "Prefix", service: str = "web", port: object = 80
) -> dict:
    key = "number" if isinstance(port, int) else "name"
    return {
        "host": host,
        "http": {
            "paths": [
                {
                    "path": path,
                    "pathType": path_type,
                    "backend": {"service": {"name": service, "port": {key: port}}},
                }
            ]
        },
    }


@pytest.fixture(scope="module")
def net(api: client.ApiClient) -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api)


@pytest.fixture
def classes(net: client.NetworkingV1Api) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        net.delete_ingress_class(name)


def test_ingress_validation_texts(net: client.NetworkingV1Api, namespace: str) -> None:
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("empty"))
    assert message(err).startswith('Ingress.networking.k8s.io "empty" is invalid: spec: Invalid value: ')
    assert message(err).endswith("either `defaultBackend` or `rules` must be specified")
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("ip", rules=[rule("10.0.0.1")]))
    assert message(err) == (
        'Ingress.networking.k8s.io "ip" is invalid: spec.rules[0].host: Invalid value: "10.0.0.1": '
        "must be a DNS name, not an IP address"
    )
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("dots", rules=[rule("a.example", "/a/../b")]))
    assert message(err) == (
        'Ingress.networking.k8s.io "dots" is invalid: spec.rules[0].http.paths[0].path: Invalid value: '
        "\"/a/../b\": must not contain '/../'"
    )
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("kind", rules=[rule("a.example", "/", "Regex")]))
    assert message(err) == (
        'Ingress.networking.k8s.io "kind" is invalid: spec.rules[0].http.paths[0].pathType: Unsupported '
        'value: "Regex": supported values: "Exact", "ImplementationSpecific", "Prefix"'
    )
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("port", rules=[rule("a.example", port="Http")]))
    assert message(err) == (
        'Ingress.networking.k8s.io "port" is invalid: spec.rules[0].http.paths[0].backend.service.port.name: '
        'Invalid value: "Http": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)'
    )
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, ingress("wild", rules=[rule("*.*.example")]))
    assert 'spec.rules[0].host: Invalid value: "*.*.example": a wildcard DNS-1123 subdomain' in message(err)
    bad_backend = ingress(
        "both", defaultBackend={"service": {"name": "web", "port": {"number": 80, "name": "http"}}}
    )
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, bad_backend)
    assert message(err) == (
        'Ingress.networking.k8s.io "both" is invalid: spec.defaultBackend: Invalid value: "": '
        "cannot set both port name & port number"
    )
    legacy = ingress("legacy", ingressClassName="a", rules=[rule("a.example")])
    legacy["metadata"]["annotations"] = {"kubernetes.io/ingress.class": "b"}
    with pytest.raises(ApiException) as err:
        net.create_namespaced_ingress(namespace, legacy)
    assert message(err) == (
        'Ingress.networking.k8s.io "legacy" is invalid: annotations.kubernetes.io/ingress.class: Invalid '
        'value: "b": must match `ingressClassName` when both are specified'
    )
    missing_type = ingress("nopt", rules=[rule("a.example")])
    del missing_type["spec"]["rules"][0]["http"]["paths"][0]["pathType"]
    # (the typed client refuses to send it; the server's answer is what matters)
    code, answer = raw(
        net.api_client, "POST", f"/apis/networking.k8s.io/v1/namespaces/{namespace}/ingresses", missing_type
    )
    assert code == 422 and answer["message"] == (
        'Ingress.networking.k8s.io "nopt" is invalid: spec.rules[0].http.paths[0].pathType: Required value: '
        "pathType must be specified"
    )


def test_ingress_generation_and_status(net: client.NetworkingV1Api, namespace: str) -> None:
    body = ingress("web", rules=[rule("web.example")])
    body["status"] = {"loadBalancer": {"ingress": [{"ip": "10.1.1.1"}]}}
    made = net.create_namespaced_ingress(namespace, body)
    assert made.metadata.generation == 1 and made.status.load_balancer.ingress is None
    status = {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}}}
    after = net.patch_namespaced_ingress_status("web", namespace, status)
    assert after.status.load_balancer.ingress[0].ip == "192.0.2.7" and after.metadata.generation == 1
    changed = net.patch_namespaced_ingress(
        "web", namespace, {"spec": {"rules": [rule("web.example", "/v2")]}, "status": {"loadBalancer": {}}}
    )
    assert changed.metadata.generation == 2 and changed.status.load_balancer.ingress[0].ip == "192.0.2.7"
    with pytest.raises(ApiException) as err:
        net.patch_namespaced_ingress_status(
            "web", namespace, {"status": {"loadBalancer": {"ingress": [{"hostname": "10.2.2.2"}]}}}
        )
    assert message(err) == (
        'Ingress.networking.k8s.io "web" is invalid: status.loadBalancer.ingress[0].hostname: Invalid value: '
        '"10.2.2.2": must be a DNS name, not an IP address'
    )


def test_ingress_class_defaults_validation_and_immutability(
    net: client.NetworkingV1Api, classes: list[str]
) -> None:
    with pytest.raises(ApiException) as err:
        net.create_ingress_class({"metadata": {"name": "t-bad"}, "spec": {"controller": "nginx"}})
    assert message(err) == (
        'IngressClass.networking.k8s.io "t-bad" is invalid: spec.controller: Invalid value: "nginx": '
        'must be a domain-prefixed path (such as "acme.io/foo")'
    )
    with pytest.raises(ApiException) as err:
        net.create_ingress_class(
            {
                "metadata": {"name": "t-ns"},
                "spec": {
                    "controller": "example.com/c",
                    "parameters": {"kind": "K", "name": "p", "scope": "Namespace"},
                },
            }
        )
    assert message(err) == (
        'IngressClass.networking.k8s.io "t-ns" is invalid: spec.parameters.namespace: Required value: '
        "`parameters.scope` is set to 'Namespace'"
    )
    made = net.create_ingress_class(
        {
            "metadata": {"name": "t-params"},
            "spec": {
                "controller": "example.com/c",
                "parameters": {"apiGroup": "k8s.example.com", "kind": "K", "name": "p"},
            },
        }
    )
    classes.append("t-params")
    assert made.spec.parameters.scope == "Cluster" and made.metadata.generation == 1
    with pytest.raises(ApiException) as err:
        net.patch_ingress_class("t-params", {"spec": {"controller": "example.com/other"}})
    assert message(err) == (
        'IngressClass.networking.k8s.io "t-params" is invalid: spec.controller: Invalid value: '
        '"example.com/other": field is immutable'
    )


def test_default_ingress_class_admission(
    net: client.NetworkingV1Api, classes: list[str], namespace: str
) -> None:
    mark = {"ingressclass.kubernetes.io/is-default-class": "true"}
    for name in ("t-a-older", "t-b-newer"):
        net.create_ingress_class(
            {"metadata": {"name": name, "annotations": mark}, "spec": {"controller": "example.com/c"}}
        )
        classes.append(name)
        time.sleep(
            1.1
        )  # creationTimestamp counts seconds: the second class is newer (a tie would pick t-a-older by name)
    chosen = net.create_namespaced_ingress(namespace, ingress("plain", rules=[rule("a.example")]))
    assert chosen.spec.ingress_class_name == "t-b-newer"
    named = net.create_namespaced_ingress(
        namespace, ingress("named", ingressClassName="other", rules=[rule("a.example")])
    )
    assert named.spec.ingress_class_name == "other"
    legacy = ingress("legacy", rules=[rule("a.example")])
    legacy["metadata"]["annotations"] = {"kubernetes.io/ingress.class": "old"}
    assert net.create_namespaced_ingress(namespace, legacy).spec.ingress_class_name is None


def test_kubectl_create_ingress_and_columns(kubectl: Kubectl, namespace: str, classes: list[str]) -> None:
    kubectl(
        "apply",
        "-f",
        "-",
        input="apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: t-cols}\n"
        "spec: {controller: example.com/cols, parameters: {apiGroup: k8s.example.com, kind: Params, name: p}}\n",
    )
    classes.append("t-cols")
    out = kubectl(
        "create", "ingress", "web", "-n", namespace, "--class=t-cols", "--rule=web.example/*=web:80"
    )
    assert out.strip() == "ingress.networking.k8s.io/web created"
    made = kubectl("get", "ingress", "web", "-n", namespace, "-o", "jsonpath={.spec.rules[0].http.paths[0]}")
    assert '"pathType":"Prefix"' in made and '"path":"/"' in made
    kubectl(
        "create", "ingress", "tls", "-n", namespace, "--class=t-cols", "--rule=a.example/=web:80,tls=cert"
    )
    kubectl(
        "patch",
        "ingress",
        "tls",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.9"},{"ip":"192.0.2.8"}]}}}',
    )
    rows = [line.split() for line in kubectl("get", "ingress", "-n", namespace).splitlines()]
    assert rows[0] == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert rows[1][:5] == ["tls", "t-cols", "a.example", "192.0.2.8,192.0.2.9", "80,"] and rows[1][5] == "443"
    assert rows[2][:4] == ["web", "t-cols", "web.example", "80"]
    rows = [line.split() for line in kubectl("get", "ingressclass", "t-cols").splitlines()]
    assert rows[0] == ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
    assert rows[1][:3] == ["t-cols", "example.com/cols", "Params.k8s.example.com/p"]
    resources = {
        tuple(line.split())
        for line in kubectl("api-resources", "--api-group=networking.k8s.io", "--no-headers").splitlines()
    }
    assert ("ingresses", "ing", "networking.k8s.io/v1", "true", "Ingress") in resources
    assert ("ingressclasses", "networking.k8s.io/v1", "false", "IngressClass") in resources
