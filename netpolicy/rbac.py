"""What the agent may read, as the ClusterRole and ClusterRoleBinding a network-policy addon ships with
its DaemonSet (kube-router's and Calico's manifests do the same): get/list/watch NetworkPolicies, Pods
and Namespaces, and create/patch Events (a policy it cannot program is reported on the policy). The
rig applies them before it starts the agent; any cluster can apply them the same way."""

from __future__ import annotations

from typing import Any

USER = "system:pykubelet-netpolicy"
ROLE = "system:pykubelet-netpolicy"
READ = ["get", "list", "watch"]


def cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": ROLE},
        "rules": [
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": READ},
            {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": READ},
            {
                "apiGroups": ["", "events.k8s.io"],
                "resources": ["events"],
                "verbs": ["create", "patch", "update"],
            },
        ],
    }


def cluster_role_binding(user: str = USER) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def manifests(user: str = USER) -> list[dict[str, Any]]:
    """The objects to apply, in order."""
    return [cluster_role(), cluster_role_binding(user)]
