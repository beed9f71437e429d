"""The Node authorizer's graph and decisions, and NodeRestriction's rules, on plain objects (no server):
which references of a pod reach its node, that moving or deleting a pod takes the access away, and
upstream's texts for what a node may not do."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from controlplane.apiserver import errors
from controlplane.apiserver.admission import AdmissionRequest
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import Attributes
from controlplane.apiserver.kinds import lease, node, pod
from controlplane.apiserver.nodeauthz.authorizer import NodeAuthorizer, node_identity
from controlplane.apiserver.nodeauthz.graph import (
    CONFIGMAP,
    POD,
    PVC,
    SECRET,
    SERVICE_ACCOUNT,
    NodeGraph,
    pod_refs,
)
from controlplane.apiserver.nodeauthz.restriction import NodeRestriction, forbidden_labels

N1 = UserInfo("system:node:n1", groups=("system:nodes", "system:authenticated"))


def make_pod(name: str, node_name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"nodeName": node_name, **spec}}


FULL_SPEC = {
    "serviceAccountName": "robot",
    "imagePullSecrets": [{"name": "pull"}],
    "containers": [
        {
            "name": "c",
            "envFrom": [{"secretRef": {"name": "env-secret"}}, {"configMapRef": {"name": "env-cm"}}],
            "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "key-secret", "key": "k"}}},
                {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "key-cm", "key": "k"}}},
            ],
        }
    ],
    "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
    "volumes": [
        {"name": "s", "secret": {"secretName": "vol-secret"}},
        {"name": "c", "configMap": {"name": "vol-cm"}},
        {"name": "p", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
        {
            "name": "proj",
            "projected": {
                "sources": [
                    {"secret": {"name": "proj-secret"}},
                    {"configMap": {"name": "proj-cm"}},
                    {"serviceAccountToken": {"path": "token"}},
                ]
            },
        },
        {"name": "csi", "csi": {"driver": "x", "nodePublishSecretRef": {"name": "csi-secret"}}},
    ],
}


def test_pod_refs_visit_what_upstream_visits() -> None:
    refs = pod_refs(make_pod("web", "n1", **FULL_SPEC))
    assert refs is not None and refs.node == "n1" and refs.service_account == "robot"
    assert refs.secrets == {
        "pull",
        "env-secret",
        "key-secret",
        "init-secret",
        "vol-secret",
        "proj-secret",
        "csi-secret",
    }
    assert refs.configmaps == {"env-cm", "key-cm", "vol-cm", "proj-cm"}
    assert refs.pvcs == {"data", "web-e"}
    assert pod_refs(make_pod("web", "")) is None


def test_graph_follows_binding_moves_and_deletes() -> None:
    graph = NodeGraph()
    key = ("ns", "web")
    graph.set_pod(key, make_pod("web", "n1", **FULL_SPEC))
    assert graph.has_path("n1", SECRET, "ns", "vol-secret") and graph.has_path(
        "n1", CONFIGMAP, "ns", "env-cm"
    )
    assert graph.has_path("n1", PVC, "ns", "data") and graph.has_path("n1", SERVICE_ACCOUNT, "ns", "robot")
    assert graph.has_path("n1", POD, "ns", "web")
    assert not graph.has_path("n2", SECRET, "ns", "vol-secret")
    assert not graph.has_path("n1", SECRET, "other", "vol-secret")
    # a second pod on n2 shares one secret; deleting the first leaves n2's path only
    graph.set_pod(
        ("ns", "api"), make_pod("api", "n2", volumes=[{"name": "s", "secret": {"secretName": "vol-secret"}}])
    )
    graph.set_pod(key, None)
    assert not graph.has_path("n1", SECRET, "ns", "vol-secret") and graph.has_path(
        "n2", SECRET, "ns", "vol-secret"
    )
    assert not graph.has_path("n1", POD, "ns", "web")
    graph.set_pod(("ns", "api"), None)
    assert graph.edges == {} and graph.pods == {}


def test_graph_reaches_a_claims_volume() -> None:
    """upstream's pv -> pvc edge: a node reads a PersistentVolume whose claim one of its pods uses."""
    graph = NodeGraph()
    graph.set_pod(("ns", "web"), make_pod("web", "n1", **FULL_SPEC))
    graph.pv_claims["pv-1"] = ("ns", "data")
    graph.pv_claims["pv-2"] = ("ns", "unused")
    authorizer = NodeAuthorizer(graph)
    assert authorizer.authorize(attrs("get", "persistentvolumes", name="pv-1")) is not None
    assert authorizer.authorize(attrs("get", "persistentvolumes", name="pv-1")).allowed
    refused = authorizer.authorize(attrs("get", "persistentvolumes", name="pv-2"))
    assert refused is not None and not refused.allowed
    assert refused.reason == "no relationship found between node 'n1' and this object"
    assert not authorizer.authorize(attrs("list", "persistentvolumes")).allowed


def test_node_identity() -> None:
    assert node_identity(N1) == ("n1", True)
    assert node_identity(UserInfo("system:node:n1", groups=("system:authenticated",))) == ("", False)
    assert node_identity(UserInfo("alice", groups=("system:nodes",))) == ("", False)
    assert node_identity(UserInfo("system:node:", groups=("system:nodes",))) == ("", True)


def attrs(
    verb: str,
    resource: str,
    *,
    sub: str = "",
    ns: str = "",
    name: str = "",
    group: str = "",
    selector: str = "",
    user: UserInfo = N1,
) -> Attributes:
    return Attributes(user, verb, group, "v1", resource, sub, ns, name, field_selector=selector)


@pytest.fixture
def authorizer() -> NodeAuthorizer:
    graph = NodeGraph()
    graph.set_pod(("ns", "web"), make_pod("web", "n1", **FULL_SPEC))
    graph.set_pod(
        ("ns", "other"), make_pod("other", "n2", volumes=[{"name": "s", "secret": {"secretName": "theirs"}}])
    )
    return NodeAuthorizer(graph)


@pytest.mark.parametrize(
    "request_,allowed,reason",
    [
        (attrs("get", "secrets", ns="ns", name="vol-secret"), True, ""),
        (attrs("watch", "secrets", ns="ns", name="vol-secret"), True, ""),
        (
            attrs("get", "secrets", ns="ns", name="theirs"),
            False,
            "no relationship found between node 'n1' and this object",
        ),
        (attrs("list", "secrets", ns="ns"), False, "No Object name found"),
        (
            attrs("update", "secrets", ns="ns", name="vol-secret"),
            False,
            "can only read resources of this type",
        ),
        (attrs("get", "configmaps", ns="ns", name="env-cm"), True, ""),
        (attrs("get", "persistentvolumeclaims", ns="ns", name="data"), True, ""),
        (
            attrs("list", "persistentvolumeclaims", ns="ns"),
            False,
            "can only get individual resources of this type",
        ),
        (attrs("create", "serviceaccounts", sub="token", ns="ns", name="robot"), True, ""),
        (
            attrs("create", "serviceaccounts", sub="token", ns="ns", name="default"),
            False,
            "no relationship found between node 'n1' and this object",
        ),
        (attrs("get", "nodes", name="n1"), True, ""),
        (attrs("get", "nodes", name="n2"), False, "node 'n1' cannot read 'n2', only its own Node object"),
        (attrs("list", "nodes"), False, "node 'n1' cannot read all nodes, only its own Node object"),
        (attrs("patch", "nodes", name="n2"), True, ""),  # NodeRestriction refuses it
        (attrs("delete", "nodes", name="n1"), False, ""),
        (attrs("list", "pods", selector="spec.nodeName=n1"), True, ""),
        (
            attrs("watch", "pods", selector="spec.nodeName=n2"),
            False,
            "can only list/watch pods with spec.nodeName field selector",
        ),
        (attrs("get", "pods", ns="ns", name="web"), True, ""),
        (
            attrs("get", "pods", ns="ns", name="other"),
            False,
            "no relationship found between node 'n1' and this object",
        ),
        (attrs("patch", "pods", sub="status", ns="ns", name="other"), True, ""),  # NodeRestriction refuses it
        (attrs("update", "leases", group="coordination.k8s.io", ns="kube-node-lease", name="n1"), True, ""),
        (
            attrs("update", "leases", group="coordination.k8s.io", ns="kube-node-lease", name="n2"),
            False,
            "can only access node lease with the same name as the requesting node",
        ),
        (
            attrs("get", "leases", group="coordination.k8s.io", ns="kube-system", name="n1"),
            False,
            'can only access leases in the "kube-node-lease" system namespace',
        ),
        (attrs("list", "services"), True, ""),  # system:node's static rules
        (attrs("list", "namespaces"), False, ""),
    ],
)
def test_node_authorizer_decisions(
    authorizer: NodeAuthorizer, request_: Attributes, allowed: bool, reason: str
) -> None:
    decision = authorizer.authorize(request_)
    assert (decision is not None and decision.allowed) is allowed
    assert (decision.reason if decision is not None else "") == reason


def test_non_nodes_get_no_opinion(authorizer: NodeAuthorizer) -> None:
    assert (
        authorizer.authorize(attrs("get", "secrets", ns="ns", name="vol-secret", user=UserInfo("alice")))
        is None
    )


# --- NodeRestriction -----------------------------------------------------------------------------------


@dataclass
class FakeCache:
    objects: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.objects.get(key)


@dataclass
class FakeRegistry:
    cache: FakeCache = field(default_factory=FakeCache)


def admission(
    kind: Any,
    operation: str,
    obj: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    sub: str = "",
    ns: str = "",
    name: str = "",
    user: UserInfo = N1,
) -> AdmissionRequest:
    return AdmissionRequest(
        operation,
        kind,
        sub,
        ns,
        name or obj.get("metadata", {}).get("name", ""),
        obj,
        old,
        user,
        FakeRegistry(),
    )  # type: ignore[arg-type]


def refused(request: AdmissionRequest, delete: bool = False) -> str:
    with pytest.raises(errors.ApiError) as err:
        (NodeRestriction().admit_delete if delete else NodeRestriction().admit)(request)
    assert err.value.code == 403
    return err.value.message


def test_node_writes_only_itself_without_restricted_labels_or_taints() -> None:
    mine = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}}, "spec": {}}
    NodeRestriction().admit(admission(node.KIND, "CREATE", mine))
    assert (
        refused(admission(node.KIND, "UPDATE", {"metadata": {"name": "n2"}}, {"metadata": {"name": "n2"}}))
        == 'nodes "n2" is forbidden: node "n1" is not allowed to modify node "n2"'
    )
    labelled = {"metadata": {"name": "n1", "labels": {"node-restriction.kubernetes.io/x": "y"}}, "spec": {}}
    assert (
        refused(admission(node.KIND, "UPDATE", labelled, mine))
        == 'nodes "n1" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/x'
    )
    assert (
        refused(admission(node.KIND, "CREATE", labelled))
        == 'nodes "n1" is forbidden: node "n1" is not allowed to set the following labels: node-restriction.kubernetes.io/x'
    )
    tainted = {"metadata": mine["metadata"], "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    assert (
        refused(admission(node.KIND, "UPDATE", tainted, mine))
        == 'nodes "n1" is forbidden: node "n1" is not allowed to modify taints'
    )
    relabelled = {
        "metadata": {
            "name": "n1",
            "labels": {"kubernetes.io/hostname": "n1", "team": "a", "node.kubernetes.io/pool": "p"},
        },
        "spec": {},
    }
    NodeRestriction().admit(admission(node.KIND, "UPDATE", relabelled, mine))


def test_forbidden_labels_follow_the_kubelet_set() -> None:
    assert (
        forbidden_labels(
            {
                "kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": "z",
                "kubelet.kubernetes.io/x": "1",
                "example.com/a": "b",
            },
            None,
        )
        == []
    )
    assert forbidden_labels({"node-role.kubernetes.io/master": "", "foo.k8s.io/x": "1"}, None) == [
        "foo.k8s.io/x",
        "node-role.kubernetes.io/master",
    ]


def test_pods_status_delete_and_mirror_pods() -> None:
    theirs = make_pod("other", "n2")
    assert (
        refused(admission(pod.KIND, "UPDATE", theirs, theirs, sub="status", ns="ns"))
        == 'pods "other" is forbidden: node "n1" can only update pod status for pods with spec.nodeName set to itself'
    )
    mine = make_pod("web", "n1")
    relabelled = {**mine, "metadata": {**mine["metadata"], "labels": {"a": "b"}}}
    assert (
        refused(admission(pod.KIND, "UPDATE", relabelled, mine, sub="status", ns="ns"))
        == 'pods "web" is forbidden: node "n1" cannot update labels through pod status'
    )
    NodeRestriction().admit(admission(pod.KIND, "UPDATE", mine, mine, sub="status", ns="ns"))
    assert (
        refused(admission(pod.KIND, "DELETE", theirs, theirs, ns="ns"), delete=True)
        == 'pods "other" is forbidden: node "n1" can only delete pods with spec.nodeName set to itself'
    )
    NodeRestriction().admit_delete(admission(pod.KIND, "DELETE", mine, mine, ns="ns"))
    assert (
        refused(admission(pod.KIND, "CREATE", make_pod("plain", "n1"), ns="ns"))
        == 'pods "plain" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "n1" can only create mirror pods'
    )
    assert (
        refused(admission(pod.KIND, "CREATE", mine, sub="binding", ns="ns"))
        == "pods \"web\" is forbidden: unexpected pod subresource \"binding\", only 'status' and 'eviction' are allowed"
    )


def test_leases_only_its_own_in_kube_node_lease() -> None:
    own = {"metadata": {"name": "n1"}}
    NodeRestriction().admit(admission(lease.KIND, "CREATE", own, ns="kube-node-lease"))
    assert (
        refused(
            admission(lease.KIND, "UPDATE", {"metadata": {"name": "n2"}}, ns="kube-node-lease", name="n2")
        )
        == 'leases.coordination.k8s.io "n2" is forbidden: can only access node lease with the same name as the requesting node'
    )
    assert (
        refused(admission(lease.KIND, "CREATE", own, ns="default"))
        == 'leases.coordination.k8s.io "n1" is forbidden: can only access leases in the "kube-node-lease" system namespace'
    )


def test_other_users_pass() -> None:
    alice = UserInfo("alice", groups=("system:authenticated",))
    NodeRestriction().admit(
        admission(
            node.KIND,
            "UPDATE",
            {"metadata": {"name": "n2", "labels": {"node-restriction.kubernetes.io/x": "y"}}},
            {"metadata": {"name": "n2"}},
            user=alice,
        )
    )
