"""networking.k8s.io/v1 NetworkPolicy against the real server: upstream's defaults (policyTypes, the
ports' protocol), ValidateNetworkPolicy's 422 texts (ports, endPort, peers, ipBlock CIDRs and except,
policyTypes, selectors), generation, kubectl's columns and short name, discovery, RBAC's aggregated
roles, and a kubectl apply of a policy as Helm charts ship them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.controlplane.conftest import Kubectl, message

NP = "NetworkPolicy.networking.k8s.io"


@pytest.fixture(scope="module")
def net(api: client.ApiClient) -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api)


def policy(name: str, **spec: object) -> dict:
    body: dict = {"metadata": {"name": name}, "spec": {"podSelector": {}}}
    body["spec"].update(spec)
    return body


def refused(net: client.NetworkingV1Api, namespace: str, body: dict) -> str:
    with pytest.raises(ApiException) as err:
        net.create_namespaced_network_policy(namespace, body)
    assert err.value.status == 422
    return message(err)


def test_defaults(net: client.NetworkingV1Api, namespace: str) -> None:
    made = net.create_namespaced_network_policy(
        namespace,
        policy("deny-all", ingress=[{"ports": [{"port": 80}, {"port": "http", "protocol": "UDP"}]}]),
    )
    assert made.spec.policy_types == ["Ingress"]
    assert [(p.port, p.protocol) for p in made.spec.ingress[0].ports] == [(80, "TCP"), ("http", "UDP")]
    assert made.metadata.generation == 1
    both = net.create_namespaced_network_policy(namespace, policy("egress", egress=[{}]))
    assert both.spec.policy_types == ["Ingress", "Egress"]
    given = net.create_namespaced_network_policy(
        namespace, policy("given", egress=[{}], policyTypes=["Egress"])
    )
    assert given.spec.policy_types == ["Egress"]
    patched = net.patch_namespaced_network_policy(
        "given", namespace, {"spec": {"podSelector": {"matchLabels": {"app": "web"}}}}
    )
    assert patched.metadata.generation == 2
    relabelled = net.patch_namespaced_network_policy("given", namespace, {"metadata": {"labels": {"a": "b"}}})
    assert relabelled.metadata.generation == 2


def test_port_validation(net: client.NetworkingV1Api, namespace: str) -> None:
    assert refused(net, namespace, policy("p1", ingress=[{"ports": [{"port": 0}]}])) == (
        f'{NP} "p1" is invalid: spec.ingress[0].ports[0].port: Invalid value: 0: '
        "must be between 1 and 65535, inclusive"
    )
    assert refused(net, namespace, policy("p2", egress=[{"ports": [{"port": 90, "endPort": 80}]}])) == (
        f'{NP} "p2" is invalid: spec.egress[0].ports[0].endPort: Invalid value: 80: '
        "must be greater than or equal to `port`"
    )
    assert refused(net, namespace, policy("p3", ingress=[{"ports": [{"port": "http", "endPort": 80}]}])) == (
        f'{NP} "p3" is invalid: spec.ingress[0].ports[0].endPort: Invalid value: 80: '
        "may not be specified when `port` is non-numeric"
    )
    assert refused(net, namespace, policy("p4", ingress=[{"ports": [{"endPort": 80}]}])) == (
        f'{NP} "p4" is invalid: spec.ingress[0].ports[0].endPort: Invalid value: 80: '
        "may not be specified when `port` is not specified"
    )
    assert refused(net, namespace, policy("p5", ingress=[{"ports": [{"port": 80, "protocol": "ICMP"}]}])) == (
        f'{NP} "p5" is invalid: spec.ingress[0].ports[0].protocol: Unsupported value: "ICMP": '
        'supported values: "TCP", "UDP", "SCTP"'
    )
    assert refused(net, namespace, policy("p6", ingress=[{"ports": [{"port": "Web_1"}]}])) == (
        f'{NP} "p6" is invalid: spec.ingress[0].ports[0].port: Invalid value: "Web_1": '
        "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    )
    assert refused(net, namespace, policy("p7", ingress=[{"ports": [{"port": "8080"}]}])) == (
        f'{NP} "p7" is invalid: spec.ingress[0].ports[0].port: Invalid value: "8080": '
        "must contain at least one letter (a-z)"
    )


def test_peer_validation(net: client.NetworkingV1Api, namespace: str) -> None:
    assert refused(net, namespace, policy("n1", ingress=[{"from": [{}]}])) == (
        f'{NP} "n1" is invalid: spec.ingress[0].from[0]: Required value: must specify a peer'
    )
    both = {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}
    assert refused(net, namespace, policy("n2", egress=[{"to": [both]}])) == (
        f'{NP} "n2" is invalid: spec.egress[0].to[0]: Forbidden: may not specify both ipBlock and another peer'
    )
    bad = {"ipBlock": {"cidr": "10.0.0.0/33"}}
    assert refused(net, namespace, policy("n3", ingress=[{"from": [bad]}])) == (
        f'{NP} "n3" is invalid: spec.ingress[0].from[0].ipBlock.cidr: Invalid value: "10.0.0.0/33": '
        "not a valid CIDR"
    )
    outside = {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}
    assert refused(net, namespace, policy("n4", ingress=[{"from": [outside]}])) == (
        f'{NP} "n4" is invalid: spec.ingress[0].from[0].ipBlock.except[0]: Invalid value: "10.1.0.0/24": '
        "must be a strict subset of `cidr`"
    )
    same = {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/16"]}}
    assert refused(net, namespace, policy("n5", ingress=[{"from": [same]}])).endswith(
        'ipBlock.except[0]: Invalid value: "10.0.0.0/16": must be a strict subset of `cidr`'
    )
    assert refused(net, namespace, policy("n6", ingress=[{"from": [{"ipBlock": {"cidr": ""}}]}])) == (
        f'{NP} "n6" is invalid: spec.ingress[0].from[0].ipBlock.cidr: Required value'
    )
    selector = {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}
    assert refused(net, namespace, policy("n7", ingress=[{"from": [selector]}])) == (
        f'{NP} "n7" is invalid: spec.ingress[0].from[0].podSelector.matchExpressions[0].values: '
        "Required value: must be specified when `operator` is 'In' or 'NotIn'"
    )
    fine = {"ipBlock": {"cidr": "10.0.0.1/16", "except": ["10.0.1.0/24"]}}
    assert net.create_namespaced_network_policy(namespace, policy("n8", ingress=[{"from": [fine]}]))


def test_policy_types_validation(net: client.NetworkingV1Api, namespace: str) -> None:
    assert refused(net, namespace, policy("t1", policyTypes=["Ingress", "Sideways"])) == (
        f'{NP} "t1" is invalid: spec.policyTypes[1]: Unsupported value: "Sideways": '
        'supported values: "Ingress", "Egress"'
    )
    assert refused(net, namespace, policy("t2", policyTypes=["Ingress", "Egress", "Ingress"])) == (
        f'{NP} "t2" is invalid: spec.policyTypes: Invalid value: '
        '[]networking.PolicyType{"Ingress", "Egress", "Ingress"}: may not specify more than two policyTypes'
    )
    assert refused(net, namespace, policy("t3", podSelector={"matchLabels": {"a": "-x"}})).startswith(
        f'{NP} "t3" is invalid: spec.podSelector.matchLabels: Invalid value: "-x": '
    )


def test_kubectl_columns_discovery_and_apply(kubectl: Kubectl, namespace: str, tmp_path) -> None:
    manifest = tmp_path / "np.yaml"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "web-allow", "namespace": namespace},
                "spec": {
                    "podSelector": {"matchLabels": {"app": "web"}},
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
                },
            }
        )
    )
    assert "created" in kubectl("apply", "-f", str(manifest))
    lines = kubectl("get", "netpol", "web-allow", "-n", namespace).splitlines()
    assert lines[0].split() == ["NAME", "POD-SELECTOR", "AGE"]
    assert lines[1].split()[:2] == ["web-allow", "app=web"]
    resources = json.loads(kubectl("get", "--raw", "/apis/networking.k8s.io/v1"))["resources"]
    entry = next(r for r in resources if r["name"] == "networkpolicies")
    assert entry["kind"] == "NetworkPolicy" and entry["namespaced"] is True
    assert entry["shortNames"] == ["netpol"]
    assert sorted(entry["verbs"]) == sorted(
        ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    )


WRITE = {"create", "delete", "deletecollection", "patch", "update"}


@pytest.mark.parametrize(
    ("role", "verbs", "aggregated_into"),
    [
        ("system:aggregate-to-edit", WRITE, "edit"),
        ("system:aggregate-to-view", {"get", "list", "watch"}, "view"),
    ],
)
def test_aggregated_roles_cover_networkpolicies(
    api: client.ApiClient, role: str, verbs: set[str], aggregated_into: str
) -> None:
    """Upstream's bootstrap policy: edit (and admin, which aggregates edit) may write network policies,
    view (and edit, which aggregates view) may read them."""
    found = client.RbacAuthorizationV1Api(api).read_cluster_role(role)
    granted = {
        verb
        for r in found.rules
        if "networking.k8s.io" in (r.api_groups or []) and "networkpolicies" in (r.resources or [])
        for verb in r.verbs
    }
    assert granted == verbs
    labels = found.metadata.labels or {}
    assert labels[f"rbac.authorization.k8s.io/aggregate-to-{aggregated_into}"] == "true"
