"""RBAC on the real server, through kubectl and the official client, with real client certificates:
upstream's 403 texts, a RoleBinding letting exactly its verbs through, `kubectl auth can-i` (and
--list, --as), escalation prevention, `bind` and `escalate`, bindings to missing roles, upstream's 422s,
the review kinds, impersonation, and the bootstrap policy's reconciliation across a restart."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer, api_client
from tests.controlplane.conftest import Kubectl

pytestmark = pytest.mark.integration


@pytest.fixture
def user() -> str:
    return f"u-{uuid.uuid4().hex[:6]}"


def kubectl_as(apiserver: ApiServer, name: str, tmp_path: Path, groups: tuple[str, ...] = ()) -> Kubectl:
    """kubectl with `name`'s own client certificate (CN=name, O=groups)."""
    kubeconfig = apiserver.client_kubeconfig(name, groups, tmp_path / f"{name}.kubeconfig")
    home = tmp_path / f"{name}-home"
    home.mkdir(exist_ok=True)
    return Kubectl(kubeconfig, home)


def refused(k: Kubectl, *args: str, input: str | None = None) -> str:
    proc = k.run(*args, check=False, input=input)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr.strip()


def test_no_bindings_then_a_role_binding_lets_exactly_its_verb_through(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    alice = kubectl_as(apiserver, user, tmp_path)
    assert refused(alice, "get", "pods", "-n", namespace) == (
        f'Error from server (Forbidden): pods is forbidden: User "{user}" cannot list resource "pods" in API group "" '
        f'in the namespace "{namespace}"'
    )
    assert refused(alice, "get", "nodes") == (
        f'Error from server (Forbidden): nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" '
        "at the cluster scope"
    )
    assert alice.run("auth", "can-i", "list", "pods", "-n", namespace, check=False).stdout.strip() == "no"
    kubectl("create", "role", "pod-lister", "--verb=list", "--resource=pods", "-n", namespace)
    kubectl("create", "rolebinding", "lister", "--role=pod-lister", f"--user={user}", "-n", namespace)
    assert "No resources found" in alice.run("get", "pods", "-n", namespace).stderr
    assert alice("auth", "can-i", "list", "pods", "-n", namespace).strip() == "yes"
    assert alice.run("auth", "can-i", "create", "pods", "-n", namespace, check=False).stdout.strip() == "no"
    assert alice.run("auth", "can-i", "list", "pods", "-n", "default", check=False).stdout.strip() == "no"
    assert "forbidden" in refused(alice, "run", "p", "--image=busybox", "-n", namespace)
    assert refused(alice, "get", "pod", "x", "-n", namespace) == (
        f'Error from server (Forbidden): pods "x" is forbidden: User "{user}" cannot get resource "pods" in API group "" '
        f'in the namespace "{namespace}"'
    )
    # The table kubectl prints for the binding is upstream's.
    wide = kubectl("get", "rolebinding", "lister", "-n", namespace, "-o", "wide").splitlines()
    assert wide[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert wide[1].split()[:2] == ["lister", "Role/pod-lister"] and user in wide[1]


def test_auth_can_i_list(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    kubectl(
        "create",
        "role",
        "cm-editor",
        "--verb=get,update",
        "--resource=configmaps",
        "--resource-name=app-config",
        "-n",
        namespace,
    )
    kubectl("create", "rolebinding", "cm", "--role=cm-editor", f"--user={user}", "-n", namespace)
    rows = kubectl_as(apiserver, user, tmp_path)("auth", "can-i", "--list", "-n", namespace).splitlines()
    assert rows[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    assert ["configmaps", "[]", "[app-config]", "[get", "update]"] in [r.split() for r in rows]
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in [
        r.split() for r in rows
    ]
    assert ["[/api/*]", "[]", "[get]"] in [r.split() for r in rows]
    # The administrator asks on the user's behalf.
    assert (
        kubectl("auth", "can-i", "update", "configmaps/app-config", "-n", namespace, "--as", user).strip()
        == "yes"
    )
    assert (
        kubectl.run(
            "auth", "can-i", "update", "configmaps/other", "-n", namespace, "--as", user, check=False
        ).stdout.strip()
        == "no"
    )


def test_escalation_through_a_binding_is_refused(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    kubectl("create", "role", "binder", "--verb=create,get", "--resource=rolebindings", "-n", namespace)
    kubectl("create", "rolebinding", "binder", "--role=binder", f"--user={user}", "-n", namespace)
    alice = kubectl_as(apiserver, user, tmp_path)
    message = refused(
        alice,
        "create",
        "rolebinding",
        "grab",
        "--clusterrole=cluster-admin",
        f"--user={user}",
        "-n",
        namespace,
    )
    assert message == (
        f'error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "{user}" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}\n{NonResourceURLs:["*"], Verbs:["*"]}'
    )
    # What one holds may be bound; `bind` on a role lets one bind it without holding it, and only that role.
    alice("create", "rolebinding", "self", "--role=binder", f"--user={user}", "-n", namespace)
    kubectl("create", "role", "secret-reader", "--verb=get", "--resource=secrets", "-n", namespace)
    kubectl("create", "role", "secret-writer", "--verb=update", "--resource=secrets", "-n", namespace)
    kubectl(
        "create",
        "role",
        "may-bind",
        "--verb=bind",
        "--resource=roles",
        "--resource-name=secret-reader",
        "-n",
        namespace,
    )
    kubectl("create", "rolebinding", "may-bind", "--role=may-bind", f"--user={user}", "-n", namespace)
    alice("create", "rolebinding", "readers", "--role=secret-reader", "--group=readers", "-n", namespace)
    assert "is attempting to grant RBAC permissions not currently held" in refused(
        alice, "create", "rolebinding", "writers", "--role=secret-writer", "--group=writers", "-n", namespace
    )


def test_creating_a_role_needs_its_rules_or_escalate(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    kubectl("create", "role", "role-writer", "--verb=create,update,get", "--resource=roles", "-n", namespace)
    kubectl("create", "rolebinding", "writer", "--role=role-writer", f"--user={user}", "-n", namespace)
    alice = kubectl_as(apiserver, user, tmp_path)
    assert refused(
        alice, "create", "role", "secrets", "--verb=get", "--resource=secrets", "-n", namespace
    ) == (
        f'Error from server (Forbidden): roles.rbac.authorization.k8s.io "secrets" is forbidden: user "{user}" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}'
    )
    alice("create", "role", "my-own", "--verb=get", "--resource=roles", "-n", namespace)
    kubectl("create", "role", "escalator", "--verb=escalate", "--resource=roles", "-n", namespace)
    kubectl("create", "rolebinding", "escalator", "--role=escalator", f"--user={user}", "-n", namespace)
    alice("create", "role", "secrets", "--verb=get", "--resource=secrets", "-n", namespace)


def test_binding_to_a_missing_role_grants_nothing(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    kubectl(
        "create", "rolebinding", "dangling", "--clusterrole=no-such-role", f"--user={user}", "-n", namespace
    )
    alice = kubectl_as(apiserver, user, tmp_path)
    assert refused(alice, "get", "configmaps", "-n", namespace) == (
        f'Error from server (Forbidden): configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API '
        f'group "" in the namespace "{namespace}": RBAC: clusterrole.rbac.authorization.k8s.io "no-such-role" not found'
    )
    kubectl("create", "clusterrole", "no-such-role", "--verb=list", "--resource=configmaps")
    try:
        assert alice("auth", "can-i", "list", "configmaps", "-n", namespace).strip() == "yes"
    finally:
        kubectl("delete", "clusterrole", "no-such-role")


BAD_ROLE = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bad}
rules:
- apiGroups: [""]
  resources: [pods]
- verbs: [get]
  nonResourceURLs: [/healthz]
"""


def test_invalid_roles_and_bindings_get_upstreams_422(
    kubectl: Kubectl, namespace: str, api: client.ApiClient
) -> None:
    message = refused(kubectl, "apply", "-n", namespace, "-f", "-", input=BAD_ROLE)
    assert message == (
        'The Role "bad" is invalid: \n* rules[0].verbs: Required value: verbs must contain at least one value\n'
        '* rules[1].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to non-resource URLs'
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="b"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[client.RbacV1Subject(kind="User", name="x")],
        ),
    )
    with pytest.raises(ApiException) as err:
        rbac.patch_namespaced_role_binding("b", namespace, {"roleRef": {"name": "edit"}})
    status = json.loads(err.value.body)
    assert err.value.status == 422 and status["message"] == (
        'RoleBinding.rbac.authorization.k8s.io "b" is invalid: roleRef: Invalid value: '
        'rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"ClusterRole", Name:"edit"}: cannot change roleRef'
    )
    with pytest.raises(ApiException) as err:
        rbac.create_cluster_role_binding(
            client.V1ClusterRoleBinding(
                metadata=client.V1ObjectMeta(name=f"bad-{namespace}"),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="x"),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="sa")],
            )
        )
    assert json.loads(err.value.body)["message"] == (
        f'ClusterRoleBinding.rbac.authorization.k8s.io "bad-{namespace}" is invalid: [roleRef.kind: Unsupported value: '
        '"Role": supported values: "ClusterRole", subjects[0].namespace: Required value]'
    )


def test_access_reviews(api: client.ApiClient, kubectl: Kubectl, namespace: str, user: str) -> None:
    kubectl("create", "role", "reader", "--verb=get", "--resource=secrets", "-n", namespace)
    kubectl("create", "rolebinding", "reader", "--role=reader", f"--user={user}", "-n", namespace)
    authz = client.AuthorizationV1Api(api)
    review = authz.create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:authenticated"],
                resource_attributes=client.V1ResourceAttributes(
                    verb="get", resource="secrets", namespace=namespace
                ),
            )
        )
    )
    assert review.status.allowed
    assert (
        review.status.reason
        == f'RBAC: allowed by RoleBinding "reader/{namespace}" of Role "reader" to User "{user}"'
    )
    local = authz.create_namespaced_local_subject_access_review(
        namespace,
        client.V1LocalSubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                resource_attributes=client.V1ResourceAttributes(
                    verb="delete", resource="secrets", namespace=namespace
                ),
            )
        ),
    )
    assert local.status.allowed is False and not local.status.denied
    with pytest.raises(ApiException) as err:
        authz.create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    non_resource_attributes=client.V1NonResourceAttributes(path="/healthz", verb="get")
                )
            )
        )
    assert err.value.status == 422 and json.loads(err.value.body)["message"] == (
        'SubjectAccessReview.authorization.k8s.io "" is invalid: spec.user: Invalid value: "": at least one of user or '
        "group must be specified"
    )
    with pytest.raises(ApiException) as err:
        authz.create_namespaced_local_subject_access_review(
            namespace,
            client.V1LocalSubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=user,
                    resource_attributes=client.V1ResourceAttributes(
                        verb="get", resource="secrets", namespace="elsewhere"
                    ),
                )
            ),
        )
    assert json.loads(err.value.body)["message"] == (
        'LocalSubjectAccessReview.authorization.k8s.io "" is invalid: spec.resourceAttributes.namespace: Invalid value: '
        '"elsewhere": must match metadata.namespace'
    )
    mine = authz.create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                non_resource_attributes=client.V1NonResourceAttributes(path="/anything", verb="delete")
            )
        )
    )
    assert mine.status.allowed  # the administrator


def test_impersonation_needs_the_verb(
    apiserver: ApiServer, kubectl: Kubectl, namespace: str, user: str, tmp_path: Path
) -> None:
    alice = kubectl_as(apiserver, user, tmp_path)
    other = f"{user}-other"
    pods = f"/api/v1/namespaces/{namespace}/pods"
    # (get --raw: kubectl's discovery, impersonated too, would stop it before the request)
    assert refused(alice, "get", "--raw", pods, "--as", other) == (
        f'Error from server (Forbidden): users "{other}" is forbidden: User "{user}" cannot impersonate resource "users" '
        'in API group "" at the cluster scope'
    )
    kubectl(
        "create",
        "clusterrole",
        f"imp-{user}",
        "--verb=impersonate",
        "--resource=users",
        f"--resource-name={other}",
    )
    kubectl("create", "clusterrolebinding", f"imp-{user}", f"--clusterrole=imp-{user}", f"--user={user}")
    try:
        # Now alice is the other user, who may not list pods; and she may not add a group without `impersonate groups`.
        assert f'User "{other}" cannot list resource "pods"' in refused(
            alice, "get", "--raw", pods, "--as", other
        )
        assert refused(alice, "get", "--raw", pods, "--as", other, "--as-group", "devs") == (
            f'Error from server (Forbidden): groups "devs" is forbidden: User "{user}" cannot impersonate resource '
            '"groups" in API group "" at the cluster scope'
        )
        whoami = json.loads(alice("auth", "whoami", "--as", other, "-o", "json"))
        assert whoami["status"]["userInfo"] == {"username": other, "groups": ["system:authenticated"]}
        # The administrator impersonates anyone, with groups.
        as_admin = json.loads(
            kubectl("auth", "whoami", "--as", "system:serviceaccount:demo:robot", "-o", "json")
        )
        assert as_admin["status"]["userInfo"]["groups"] == [
            "system:serviceaccounts",
            "system:serviceaccounts:demo",
            "system:authenticated",
        ]
    finally:
        kubectl("delete", "clusterrolebinding", f"imp-{user}")
        kubectl("delete", "clusterrole", f"imp-{user}")


def test_discovery_is_for_the_authenticated_and_public_paths_for_all(
    apiserver: ApiServer, user: str, tmp_path: Path
) -> None:
    alice = kubectl_as(apiserver, user, tmp_path)
    assert json.loads(alice("get", "--raw", "/api"))["kind"] == "APIVersions"
    assert alice("get", "--raw", "/healthz") == "ok"
    assert refused(alice, "get", "--raw", "/metrics") == (
        f'Error from server (Forbidden): forbidden: User "{user}" cannot get path "/metrics"'
    )


def test_the_bootstrap_policy_is_reconciled_at_every_start(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "api").start()
    try:
        with api_client(server.kubeconfig) as api:
            rbac = client.RbacAuthorizationV1Api(api)
            basic = rbac.read_cluster_role("system:basic-user")
            assert len(basic.rules) == 2
            rbac.patch_cluster_role(
                "system:basic-user", {"rules": [api.sanitize_for_serialization(basic.rules[0])]}
            )
            rbac.patch_cluster_role(
                "system:discovery",
                {
                    "metadata": {"annotations": {"rbac.authorization.kubernetes.io/autoupdate": "false"}},
                    "rules": [{"verbs": ["get"], "nonResourceURLs": ["/version"]}],
                },
            )
            rbac.delete_cluster_role_binding("system:public-info-viewer")
            rbac.patch_cluster_role_binding(
                "system:basic-user",
                {"subjects": [{"kind": "Group", "name": "extra", "apiGroup": "rbac.authorization.k8s.io"}]},
            )
        server.stop()
        server.start()
        with api_client(server.kubeconfig) as api:
            rbac = client.RbacAuthorizationV1Api(api)
            assert len(rbac.read_cluster_role("system:basic-user").rules) == 2  # the missing rule is back
            # autoupdate "false": its owner's
            assert [r.non_resource_urls for r in rbac.read_cluster_role("system:discovery").rules] == [
                ["/version"]
            ]
            assert (
                rbac.read_cluster_role_binding("system:public-info-viewer").role_ref.name
                == "system:public-info-viewer"
            )
            subjects = [s.name for s in rbac.read_cluster_role_binding("system:basic-user").subjects]
            assert subjects == ["extra", "system:authenticated"]  # an administrator's addition stays
    finally:
        server.stop()
