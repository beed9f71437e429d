"""RBAC's pure parts against upstream's worked cases: rule matching (rbac.RuleAllows), covers() and
the escalation message, the resolver's subject index and its answers, the bootstrap policy's shape,
reconciliation, and impersonation's header parsing. No server."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from controlplane.apiserver import errors
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.authz import (
    AllowAll,
    Attributes,
    AuthorizerChain,
    Decision,
    exact_field,
    forbidden,
    no_opinion,
)
from controlplane.apiserver.impersonation import impersonate, requests_of
from controlplane.apiserver.rbac.authorizer import PrivilegedGroups, RBACAuthorizer
from controlplane.apiserver.rbac.controller_policy import controller_role_bindings, controller_roles
from controlplane.apiserver.rbac.covers import compact, compact_string, covers, escalation_message
from controlplane.apiserver.rbac.policy import cluster_role_bindings, cluster_roles
from controlplane.apiserver.rbac.reconcile import reconcile_binding, reconcile_role
from controlplane.apiserver.rbac.resolver import RuleResolver
from controlplane.apiserver.rbac.rules import PolicyRule, Rule, rule
from controlplane.apiserver.rbac.validation import policy_rule, role_ref_unchanged, subject

ALICE = UserInfo("alice", groups=("devs", "system:authenticated"))


def res(verb: str, resource: str, group: str = "", sub: str = "", ns: str = "", name: str = "") -> Attributes:
    return Attributes(ALICE, verb, group, "v1", resource, sub, ns, name)


def url(verb: str, path: str) -> Attributes:
    return Attributes(ALICE, verb, path=path, resource_request=False)


def allows(policy: PolicyRule, attrs: Attributes) -> bool:
    return Rule.compile(policy).allows(attrs)


# --- rule matching ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy,attrs,expected",
    [
        (rule(["get"], [""], ["pods"]), res("get", "pods"), True),
        (rule(["get"], [""], ["pods"]), res("list", "pods"), False),
        (rule(["*"], [""], ["pods"]), res("deletecollection", "pods"), True),
        (rule(["get"], ["apps"], ["pods"]), res("get", "pods"), False),
        (rule(["get"], ["*"], ["deployments"]), res("get", "deployments", "apps"), True),
        (rule(["get"], [""], ["*"]), res("get", "secrets"), True),
        # a subresource is its own resource: pods does not cover pods/log, */log covers every log
        (rule(["get"], [""], ["pods"]), res("get", "pods", sub="log"), False),
        (rule(["get"], [""], ["pods/log"]), res("get", "pods", sub="log"), True),
        (rule(["get"], [""], ["*/log"]), res("get", "pods", sub="log"), True),
        (rule(["get"], [""], ["*/log"]), res("get", "pods"), False),
        (rule(["get"], [""], ["*/scale"]), res("get", "deployments", sub="status"), False),
        (rule(["get"], [""], ["*"]), res("get", "pods", sub="log"), True),
        # resource names restrict by name; a list (no name) is not a named request
        (rule(["get"], [""], ["configmaps"], ["cm1"]), res("get", "configmaps", name="cm1"), True),
        (rule(["get"], [""], ["configmaps"], ["cm1"]), res("get", "configmaps", name="cm2"), False),
        (rule(["list"], [""], ["configmaps"], ["cm1"]), res("list", "configmaps"), False),
        # non-resource URLs: exact, trailing *, everything; never for resource requests
        (rule(["get"], urls=["/healthz"]), url("get", "/healthz"), True),
        (rule(["get"], urls=["/healthz"]), url("get", "/healthz/etcd"), False),
        (rule(["get"], urls=["/healthz/*"]), url("get", "/healthz/etcd"), True),
        (rule(["get"], urls=["/apis*"]), url("get", "/apis/apps/v1"), True),
        (rule(["get"], urls=["*"]), url("get", "/anything"), True),
        (rule(["get"], urls=["*"]), res("get", "pods"), False),
        (rule(["get"], [""], ["pods"]), url("get", "/api"), False),
    ],
)
def test_rule_matching(policy: PolicyRule, attrs: Attributes, expected: bool) -> None:
    assert allows(policy, attrs) is expected


def test_rule_builder_sorts_as_upstream() -> None:
    built = rule(["watch", "get", "list"], ["apps", ""], ["pods", "configmaps"])
    assert built.to_dict() == {
        "verbs": ["get", "list", "watch"],
        "apiGroups": ["", "apps"],
        "resources": ["configmaps", "pods"],
    }


# --- covers and the escalation message -----------------------------------------------------------------


def test_covers_breaks_rules_into_atoms() -> None:
    owner = [rule(["get", "list"], [""], ["pods"]), rule(["get"], [""], ["configmaps"], ["a"])]
    assert covers(owner, [rule(["get"], [""], ["pods"])]) == (True, [])
    ok, missing = covers(owner, [rule(["get", "delete"], [""], ["pods", "configmaps"])])
    assert not ok
    # (the builder sorts: configmaps before pods, delete before get)
    assert missing == [
        rule(["delete"], [""], ["configmaps"]),
        rule(["get"], [""], ["configmaps"]),
        rule(["delete"], [""], ["pods"]),
    ]
    # a name-restricted owner rule covers only those names; an unrestricted one covers every name
    assert covers(owner, [rule(["get"], [""], ["configmaps"], ["a"])])[0]
    assert not covers(owner, [rule(["get"], [""], ["configmaps"], ["b"])])[0]
    assert covers([rule(["get"], [""], ["configmaps"])], [rule(["get"], [""], ["configmaps"], ["b"])])[0]


def test_covers_wildcards_and_urls() -> None:
    admin = [rule(["*"], ["*"], ["*"]), rule(["*"], urls=["*"])]
    assert covers(
        admin,
        [
            rule(["escalate"], ["rbac.authorization.k8s.io"], ["clusterroles"]),
            rule(["get"], urls=["/healthz"]),
        ],
    )[0]
    assert covers([rule(["get"], urls=["/healthz/*"])], [rule(["get"], urls=["/healthz/etcd"])])[0]
    assert not covers([rule(["get"], urls=["/healthz/*"])], [rule(["get"], urls=["/healthz"])])[0]
    # a rule for a subresource does not cover the resource, nor the other way round
    assert not covers([rule(["get"], [""], ["pods"])], [rule(["get"], [""], ["pods/log"])])[0]


def test_escalation_message_is_upstreams() -> None:
    _, missing = covers([], [rule(["get", "list"], [""], ["pods"]), rule(["get"], urls=["/metrics"])])
    assert [compact_string(r) for r in compact(missing)] == [
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}',
        '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}',
    ]
    assert escalation_message("alice", ("devs", "system:authenticated"), missing, []) == (
        'user "alice" (groups=["devs" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}\n{NonResourceURLs:["/metrics"], Verbs:["get"]}'
    )


# --- the resolver and the authorizer -------------------------------------------------------------------


def role_obj(name: str, rules: list[PolicyRule], namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta, "rules": [r.to_dict() for r in rules]}


def binding_obj(
    name: str, kind: str, role: str, subjects: list[dict[str, Any]], namespace: str = ""
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": subjects,
    }


def resolver_with(*objects: tuple[str, dict[str, Any]]) -> RuleResolver:
    resolver = RuleResolver()
    for key, obj in objects:
        resolver.apply(key, obj)
    return resolver


CR = "/clusterroles.rbac.authorization.k8s.io/"
CRB = "/clusterrolebindings.rbac.authorization.k8s.io/"
R = "/roles.rbac.authorization.k8s.io/"
RB = "/rolebindings.rbac.authorization.k8s.io/"


def test_role_binding_grants_in_its_namespace_only() -> None:
    resolver = resolver_with(
        (R + "demo/reader", role_obj("reader", [rule(["get", "list"], [""], ["pods"])], "demo")),
        (
            RB + "demo/alice-reads",
            binding_obj("alice-reads", "Role", "reader", [{"kind": "User", "name": "alice"}], "demo"),
        ),
    )
    rbac = RBACAuthorizer(resolver)
    allowed = rbac.authorize(res("list", "pods", ns="demo"))
    assert allowed.allowed
    assert (
        allowed.reason == 'RBAC: allowed by RoleBinding "alice-reads/demo" of Role "reader" to User "alice"'
    )
    assert not rbac.authorize(res("list", "pods", ns="other")).allowed
    assert not rbac.authorize(res("list", "pods")).allowed  # cluster scope
    assert not rbac.authorize(res("delete", "pods", ns="demo")).allowed


def test_subjects_users_groups_and_service_accounts() -> None:
    resolver = resolver_with(
        (CR + "view-pods", role_obj("view-pods", [rule(["get"], [""], ["pods"])])),
        (CRB + "devs", binding_obj("devs", "ClusterRole", "view-pods", [{"kind": "Group", "name": "devs"}])),
        (
            RB + "demo/robot",
            binding_obj(
                "robot", "ClusterRole", "view-pods", [{"kind": "ServiceAccount", "name": "robot"}], "demo"
            ),
        ),
    )
    rbac = RBACAuthorizer(resolver)
    assert (
        rbac.authorize(res("get", "pods", ns="x")).reason
        == 'RBAC: allowed by ClusterRoleBinding "devs" of ClusterRole "view-pods" to Group "devs"'
    )
    robot = UserInfo("system:serviceaccount:demo:robot", groups=("system:serviceaccounts",))
    # the RoleBinding's service account without a namespace is the binding's namespace's
    assert (
        rbac.authorize(Attributes(robot, "get", "", "v1", "pods", namespace="demo")).reason
        == 'RBAC: allowed by RoleBinding "robot/demo" of ClusterRole "view-pods" to ServiceAccount "robot/demo"'
    )
    assert not rbac.authorize(Attributes(robot, "get", "", "v1", "pods", namespace="other")).allowed
    stranger = UserInfo("bob", groups=("system:authenticated",))
    assert not rbac.authorize(Attributes(stranger, "get", "", "v1", "pods", namespace="demo")).allowed


def test_binding_to_a_missing_role_grants_nothing_and_says_why() -> None:
    resolver = resolver_with(
        (
            CRB + "ghost",
            binding_obj("ghost", "ClusterRole", "does-not-exist", [{"kind": "User", "name": "alice"}]),
        ),
    )
    decision = RBACAuthorizer(resolver).authorize(res("get", "pods", ns="demo"))
    assert not decision.allowed and not decision.opinion
    assert decision.reason == 'RBAC: clusterrole.rbac.authorization.k8s.io "does-not-exist" not found'
    # the role appearing later grants at once
    resolver.apply(CR + "does-not-exist", role_obj("does-not-exist", [rule(["get"], [""], ["pods"])]))
    assert RBACAuthorizer(resolver).authorize(res("get", "pods", ns="demo")).allowed


def test_changes_and_deletes_take_effect_at_once() -> None:
    resolver = resolver_with(
        (CR + "r", role_obj("r", [rule(["get"], [""], ["pods"])])),
        (CRB + "b", binding_obj("b", "ClusterRole", "r", [{"kind": "User", "name": "alice"}])),
    )
    rbac = RBACAuthorizer(resolver)
    assert rbac.authorize(res("get", "pods")).allowed
    resolver.apply(CR + "r", role_obj("r", [rule(["list"], [""], ["pods"])]))
    assert not rbac.authorize(res("get", "pods")).allowed and rbac.authorize(res("list", "pods")).allowed
    resolver.apply(CRB + "b", binding_obj("b", "ClusterRole", "r", [{"kind": "User", "name": "bob"}]))
    assert not rbac.authorize(res("list", "pods")).allowed
    resolver.apply(CRB + "b", None)
    assert resolver.cluster_index.by_subject == {}


def test_index_finds_a_users_bindings_among_many() -> None:
    objects = [(CR + "r", role_obj("r", [rule(["get"], [""], ["pods"])]))]
    for i in range(1000):
        objects.append(
            (CRB + f"b{i}", binding_obj(f"b{i}", "ClusterRole", "r", [{"kind": "User", "name": f"user{i}"}]))
        )
    resolver = resolver_with(*objects)
    assert len(resolver.cluster_index.by_subject) == 1000
    user = UserInfo("user500", groups=("system:authenticated",))
    grants = resolver.resolve(user, "").grants
    assert [g.source for g in grants] == ['ClusterRoleBinding "b500" of ClusterRole "r" to User "user500"']


def test_chain_privileged_groups_and_reasons() -> None:
    admin = UserInfo("root", groups=("system:masters",))
    chain = AuthorizerChain([PrivilegedGroups(), RBACAuthorizer(RuleResolver())])
    assert chain.authorize(Attributes(admin, "delete", "", "v1", "nodes", name="n1")).allowed
    assert chain.authorize(res("get", "pods")) == no_opinion("")

    class Says:
        def __init__(self, decision: Decision | None) -> None:
            self.decision = decision

        def authorize(self, attrs: Attributes) -> Decision | None:
            return self.decision

    joined = AuthorizerChain([Says(no_opinion("first")), Says(None), Says(no_opinion("second"))]).authorize(
        res("get", "pods")
    )
    assert joined.reason == "first\nsecond" and not joined.allowed
    assert (
        not AuthorizerChain([Says(Decision(False, "no")), AllowAll()]).authorize(res("get", "pods")).allowed
    )


@pytest.mark.parametrize(
    "attrs,message",
    [
        (
            res("list", "pods", ns="demo"),
            'pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "demo"',
        ),
        (
            res("get", "nodes", name="n1"),
            'nodes "n1" is forbidden: User "alice" cannot get resource "nodes" in API group "" at the cluster scope',
        ),
        (
            res("get", "deployments", "apps", "scale", "ns", "web"),
            'deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments/scale" in API group "apps" in the namespace "ns"',
        ),
        (url("get", "/apis"), 'forbidden: User "alice" cannot get path "/apis"'),
    ],
)
def test_forbidden_messages(attrs: Attributes, message: str) -> None:
    err = forbidden(attrs, "")
    assert (err.code, err.reason, err.message) == (403, "Forbidden", message)
    assert forbidden(attrs, "RBAC: x").message == message + ": RBAC: x"


def test_exact_field() -> None:
    assert exact_field("metadata.name=web", "metadata.name") == "web"
    assert exact_field("spec.nodeName==n1,status.phase=Running", "spec.nodeName") == "n1"
    assert exact_field("metadata.name!=web", "metadata.name") is None
    assert exact_field("", "metadata.name") is None


# --- validation -----------------------------------------------------------------------------------------


def test_rule_validation_texts() -> None:
    assert [
        e.message() for e in policy_rule({"apiGroups": [""], "resources": ["pods"]}, True, "rules[0]")
    ] == ["Required value: verbs must contain at least one value"]
    assert [
        (e.field, e.detail)
        for e in policy_rule({"verbs": ["get"], "nonResourceURLs": ["/x"]}, True, "rules[1]")
    ] == [
        (
            "rules[1].nonResourceURLs",
            'Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs',
        )
    ]
    both = policy_rule(
        {"verbs": ["get"], "resources": ["pods"], "nonResourceURLs": ["/x"]}, False, "rules[0]"
    )
    assert [e.detail for e in both] == [
        'Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs'
    ]
    assert [e.detail for e in policy_rule({"verbs": ["get"], "resources": ["pods"]}, False, "r")] == [
        "Required value: resource rules must supply at least one api group"
    ]
    assert [
        e.field
        for e in policy_rule(
            {"verbs": ["get"], "apiGroups": [""], "resources": ["a", "b"], "resourceNames": ["x"]}, False, "r"
        )
    ] == ["r.resourceNames"]


def test_binding_validation_texts() -> None:
    assert [e.message() for e in subject({"kind": "Robot", "name": "x"}, True, "subjects[0]")] == [
        'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'
    ]
    assert [e.field for e in subject({"kind": "ServiceAccount", "name": "sa"}, False, "subjects[0]")] == [
        "subjects[0].namespace"
    ]
    old = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}
    new = {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}}
    assert [e.detail for e in role_ref_unchanged(new, old)] == [
        'Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef'
    ]


# --- the bootstrap policy and its reconciliation -----------------------------------------------------------------


def test_bootstrap_policy_shape() -> None:
    roles = {r["metadata"]["name"]: r for r in cluster_roles() + controller_roles()}
    for name in (
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
        "system:node",
        "system:kube-scheduler",
        "system:kube-controller-manager",
        "system:volume-scheduler",
        "system:node-proxier",
        "system:node-bootstrapper",
        "system:auth-delegator",
        "system:monitoring",
        "system:kubelet-api-admin",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        "system:controller:replicaset-controller",
        "system:controller:deployment-controller",
        "system:controller:generic-garbage-collector",
        "system:controller:node-controller",
        "system:controller:pod-garbage-collector",
        "system:controller:service-account-controller",
        "system:controller:root-ca-cert-publisher",
        "system:controller:clusterrole-aggregation-controller",
    ):
        assert name in roles, name
    assert roles["view"]["aggregationRule"] == {
        "clusterRoleSelectors": [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]
    }
    assert roles["edit"]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    for role in roles.values():
        assert role["metadata"]["annotations"] == {"rbac.authorization.kubernetes.io/autoupdate": "true"}
        assert role["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
    bindings = {b["metadata"]["name"]: b for b in cluster_role_bindings() + controller_role_bindings()}
    assert bindings["cluster-admin"]["subjects"] == [
        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:masters"}
    ]
    assert [s["name"] for s in bindings["system:public-info-viewer"]["subjects"]] == [
        "system:authenticated",
        "system:unauthenticated",
    ]
    assert [s["name"] for s in bindings["system:discovery"]["subjects"]] == ["system:authenticated"]
    assert "subjects" not in bindings["system:node"]
    assert bindings["system:controller:replicaset-controller"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "replicaset-controller", "namespace": "kube-system"}
    ]


def test_reconcile_adds_what_is_missing_and_keeps_additions() -> None:
    expected = {
        "metadata": {"name": "r", "labels": {"a": "1"}, "annotations": {"auto": "true"}},
        "rules": [rule(["get"], [""], ["pods"]).to_dict(), rule(["list"], [""], ["pods"]).to_dict()],
    }
    existing = {
        "metadata": {"name": "r", "labels": {"a": "changed"}},
        "rules": [rule(["get"], [""], ["pods"]).to_dict(), rule(["get"], [""], ["nodes"]).to_dict()],
    }
    result = reconcile_role(expected, existing)
    assert result is not None
    assert result["metadata"]["labels"] == {"a": "changed"} and result["metadata"]["annotations"] == {
        "auto": "true"
    }
    assert result["rules"] == existing["rules"] + [rule(["list"], [""], ["pods"]).to_dict()]
    assert reconcile_role(expected, result) is None
    bound = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "User", "name": "x"}],
    }
    want = {
        "metadata": {"name": "b"},
        "roleRef": {"kind": "ClusterRole", "name": "r"},
        "subjects": [{"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"}],
    }
    merged, recreate = reconcile_binding(want, bound)
    assert not recreate and merged is not None and [s["name"] for s in merged["subjects"]] == ["x", "g"]
    assert reconcile_binding({**want, "roleRef": {"kind": "ClusterRole", "name": "other"}}, bound)[1]


# --- impersonation --------------------------------------------------------------------------------------


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_impersonation_requests() -> None:
    wanted = requests_of(
        headers(
            ("Impersonate-User", "system:serviceaccount:demo:robot"),
            ("Impersonate-Group", "a"),
            ("Impersonate-Group", "b"),
            ("Impersonate-Extra-Scopes%2Fx", "v1"),
            ("Impersonate-Uid", "42"),
        )
    )
    assert [(r.kind, r.namespace, r.name, r.extra_key) for r in wanted] == [
        ("ServiceAccount", "demo", "robot", ""),
        ("Group", "", "a", ""),
        ("Group", "", "b", ""),
        ("UserExtra", "", "v1", "scopes/x"),
        ("UID", "", "42", ""),
    ]
    with pytest.raises(errors.ApiError) as err:
        requests_of(headers(("Impersonate-Group", "a")))
    assert err.value.code == 500 and "without impersonating a user" in err.value.message


def test_impersonated_user_and_its_groups() -> None:
    allow_all = AuthorizerChain([AllowAll()])
    bob = impersonate(headers(("Impersonate-User", "bob")), ALICE, allow_all)
    assert (bob.name, bob.groups) == ("bob", ("system:authenticated",))
    robot = impersonate(headers(("Impersonate-User", "system:serviceaccount:demo:robot")), ALICE, allow_all)
    assert robot.groups == ("system:serviceaccounts", "system:serviceaccounts:demo", "system:authenticated")
    anonymous = impersonate(headers(("Impersonate-User", "system:anonymous")), ALICE, allow_all)
    assert anonymous.groups == ("system:unauthenticated",)
    assert impersonate(headers(), ALICE, allow_all) is ALICE
    with pytest.raises(errors.ApiError) as err:
        impersonate(
            headers(("Impersonate-User", "bob")), ALICE, AuthorizerChain([RBACAuthorizer(RuleResolver())])
        )
    assert err.value.message == (
        'users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" '
        "at the cluster scope"
    )


def test_only_gc_fields_changes_skip_the_escalation_check() -> None:
    from controlplane.apiserver.rbac.escalation import escalation_allowed, only_gc_fields

    old = {
        "metadata": {"name": "r", "resourceVersion": "5"},
        "rules": [rule(["get"], [""], ["pods"]).to_dict()],
    }
    owned = {**old, "metadata": {**old["metadata"], "ownerReferences": [{"uid": "u"}], "finalizers": ["x/y"]}}
    assert only_gc_fields(owned, old)
    assert not only_gc_fields({**old, "rules": []}, old)
    assert not only_gc_fields(owned, None)
    assert escalation_allowed(None) and escalation_allowed(UserInfo("root", groups=("system:masters",)))
    assert not escalation_allowed(ALICE)
