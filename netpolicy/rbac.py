"""What the agent may read, as the ClusterRole and ClusterRoleBinding a network-policy addon ships with
its DaemonSet (kube-router's and Calico's manifests do the same): get/list/watch NetworkPolicies, Pods,
Namespaces and Nodes (their pod CIDRs), and create/patch Events (a policy it cannot program is reported
on the policy). The rig applies them before it starts the agent; any cluster can apply them the same
way. A second role, without Nodes, is bound to the group system:nodes: on a host joined with `pykubelet
join` the agent runs on its node's own credential (as k3s's agent runs its policy controller), which has no
CA key to make another; it reads only its own Node there, which the Node authorizer allows, so no node
gains the right to read the others (upstream's Node authorizer refuses that, and RBAC must not undo it)."""

from __future__ import annotations

from typing import Any

USER = "system:pykubelet-netpolicy"
NODES = "system:nodes"
ROLE = "system:pykubelet-netpolicy"
READ = ["get", "list", "watch"]


NODES_ROLE = f"{ROLE}:nodes"


def cluster_role(name: str = ROLE, read: tuple[str, ...] = ("pods", "namespaces", "nodes")) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": READ},
            {"apiGroups": [""], "resources": list(read), "verbs": READ},
            {
                "apiGroups": ["", "events.k8s.io"],
                "resources": ["events"],
                "verbs": ["create", "patch", "update"],
            },
        ],
    }


def cluster_role_binding(
    user: str = USER, kind: str = "User", name: str = ROLE, role: str = ROLE
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": user}],
    }


def manifests(user: str = USER) -> list[dict[str, Any]]:
    """The objects to apply, in order."""
    return [
        cluster_role(),
        cluster_role_binding(user),
        cluster_role(NODES_ROLE, ("pods", "namespaces")),
        cluster_role_binding(NODES, "Group", NODES_ROLE, NODES_ROLE),
    ]
