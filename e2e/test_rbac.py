"""RBAC as any cluster with authorization mode Node,RBAC enforces it, through kubectl only: a user
(impersonated by the administrator, as `kubectl --as` does) is refused with upstream's text until a
RoleBinding grants exactly its verbs; `kubectl auth can-i` and `--list` tell; nobody binds what they do
not hold; impersonating needs the `impersonate` verb; a binding to a missing role grants nothing; a role
with a bad rule is refused; the aggregated `view` role gathers what is labelled for it."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from e2e.waiting import wait_for


class Kubectl:
    def __init__(self, kubeconfig: object, namespace: str) -> None:
        self.base = ["kubectl", "--kubeconfig", str(kubeconfig), "-n", namespace]

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], input=input, capture_output=True, text=True, timeout=60)

    def __call__(self, *args: str, input: str | None = None) -> str:
        proc = self.run(*args, input=input)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    def refused(self, *args: str, input: str | None = None) -> str:
        proc = self.run(*args, input=input)
        assert proc.returncode != 0, f"kubectl {' '.join(args)} was allowed: {proc.stdout}"
        return (
            proc.stderr.strip().splitlines()[-1]
            if "Error from server" in proc.stderr
            else proc.stderr.strip()
        )


@pytest.fixture
def k(kubeconfig, namespace) -> Kubectl:  # type: ignore[no-untyped-def]
    return Kubectl(kubeconfig, namespace)


@pytest.fixture
def user() -> str:
    return f"e2e-user-{uuid.uuid4().hex[:6]}"


def test_a_role_binding_lets_exactly_its_verbs_through(k: Kubectl, namespace: str, user: str) -> None:
    assert k.refused("get", "configmaps", "--as", user) == (
        f'Error from server (Forbidden): configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API '
        f'group "" in the namespace "{namespace}"'
    )
    k("create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps")
    k("create", "rolebinding", "cm-reader", "--role=cm-reader", f"--user={user}")
    wait_for(
        lambda: k.run("auth", "can-i", "list", "configmaps", "--as", user).stdout.strip() == "yes",
        timeout=30,
        what="the binding to take effect",
    )
    k("create", "configmap", "mine", "--from-literal=a=b")
    assert "mine" in k("get", "configmaps", "--as", user)
    assert k("get", "configmap", "mine", "-o", "jsonpath={.data.a}", "--as", user) == "b"
    assert k.run("auth", "can-i", "create", "configmaps", "--as", user).stdout.strip() == "no"
    assert k.run("auth", "can-i", "list", "secrets", "--as", user).stdout.strip() == "no"
    assert k.run("auth", "can-i", "list", "configmaps", "--as", user, "-n", "default").stdout.strip() == "no"
    rows = [r.split() for r in k("auth", "can-i", "--list", "--as", user).splitlines()]
    assert ["configmaps", "[]", "[]", "[get", "list]"] in rows
    assert ["selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"] in rows


def test_escalation_to_cluster_admin_is_refused(k: Kubectl, user: str) -> None:
    k("create", "role", "binder", "--verb=create,get,list", "--resource=rolebindings")
    k("create", "rolebinding", "binder", "--role=binder", f"--user={user}")
    wait_for(
        lambda: k.run("auth", "can-i", "create", "rolebindings", "--as", user).stdout.strip() == "yes",
        timeout=30,
        what="the binding to take effect",
    )
    message = k.refused(
        "create", "rolebinding", "grab", "--clusterrole=cluster-admin", f"--user={user}", "--as", user
    )
    assert message.startswith(
        f'error: failed to create rolebinding: rolebindings.rbac.authorization.k8s.io "grab" is '
        f'forbidden: user "{user}" (groups=["system:authenticated"]) is attempting to grant RBAC '
        "permissions not currently held:"
    ), message
    # Binding what one holds is fine.
    k("create", "rolebinding", "copy", "--role=binder", f"--user={user}-2", "--as", user)


def test_impersonation_needs_the_verb(k: Kubectl, user: str) -> None:
    other = f"{user}-other"
    assert k.run("auth", "can-i", "impersonate", f"users/{other}", "--as", user).stdout.strip() == "no"
    k(
        "create",
        "clusterrole",
        f"{user}-imp",
        "--verb=impersonate",
        "--resource=users",
        f"--resource-name={other}",
    )
    k("create", "clusterrolebinding", f"{user}-imp", f"--clusterrole={user}-imp", f"--user={user}")
    try:
        wait_for(
            lambda: (
                k.run("auth", "can-i", "impersonate", f"users/{other}", "--as", user).stdout.strip() == "yes"
            ),
            timeout=30,
            what="impersonate to be granted",
        )
        assert (
            k.run("auth", "can-i", "impersonate", "users/someone-else", "--as", user).stdout.strip() == "no"
        )
        assert k.run("auth", "can-i", "impersonate", "groups", "--as", user).stdout.strip() == "no"
    finally:
        k("delete", "clusterrolebinding", f"{user}-imp")
        k("delete", "clusterrole", f"{user}-imp")


def test_a_binding_to_a_missing_role_grants_nothing(k: Kubectl, namespace: str, user: str) -> None:
    missing = f"{user}-missing"
    k("create", "rolebinding", "dangling", f"--clusterrole={missing}", f"--user={user}")
    assert k.refused("get", "configmaps", "--as", user) == (
        f'Error from server (Forbidden): configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API '
        f'group "" in the namespace "{namespace}": RBAC: clusterrole.rbac.authorization.k8s.io "{missing}" not found'
    )


def test_a_role_with_a_bad_rule_is_refused(k: Kubectl) -> None:
    bad = """apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: bad}
rules:
- apiGroups: [""]
  resources: [pods]
"""
    assert k.refused("apply", "-f", "-", input=bad) == (
        'The Role "bad" is invalid: rules[0].verbs: Required value: verbs must contain at least one value'
    )


def test_view_aggregates_what_is_labelled_for_it(k: Kubectl, user: str, namespace: str) -> None:
    role = f"{user}-widgets"
    k(
        "apply",
        "-f",
        "-",
        input=f"""apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {role}
  labels: {{rbac.authorization.k8s.io/aggregate-to-view: "true"}}
rules:
- apiGroups: [""]
  resources: [podtemplates]
  verbs: [get, list]
""",
    )
    try:
        for aggregated in ("view", "edit", "admin"):
            wait_for(
                lambda a=aggregated: (
                    "podtemplates" in k("get", "clusterrole", a, "-o", "jsonpath={.rules[*].resources}")
                ),
                timeout=60,
                what=f"{aggregated} to gather the podtemplates rule",
            )
        k("create", "rolebinding", "viewer", "--clusterrole=view", f"--user={user}")
        wait_for(
            lambda: k.run("auth", "can-i", "list", "podtemplates", "--as", user).stdout.strip() == "yes",
            timeout=30,
            what="the viewer to read podtemplates",
        )
    finally:
        k("delete", "clusterrole", role)
    wait_for(
        lambda: "podtemplates" not in k("get", "clusterrole", "view", "-o", "jsonpath={.rules[*].resources}"),
        timeout=60,
        what="view to drop the rule again",
    )
