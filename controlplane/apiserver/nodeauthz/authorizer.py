"""The Node authorizer (upstream's plugin/pkg/auth/authorizer/node, with 1.32's AuthorizeNodeWithSelectors):
a node (user `system:node:<name>` in group `system:nodes`) may read only the secrets, configmaps,
PVCs and pods of pods bound to it, create tokens only for their service accounts, read only its own
Node, list and watch pods only with `spec.nodeName=<itself>`, and touch only its own Lease in
kube-node-lease. Everything else is judged by the static system:node rules; what it may write to its
Node, its pods and the pods it creates is for the NodeRestriction admission plugin (restriction.py).

Non-nodes get no opinion, so RBAC decides for them.
"""

from __future__ import annotations

from controlplane.apiserver.authz import Attributes, Decision, RuleSet, exact_field, no_opinion
from controlplane.apiserver.nodeauthz.graph import CONFIGMAP, POD, PV, PVC, SECRET, SERVICE_ACCOUNT, NodeGraph
from controlplane.apiserver.rbac.policy import NODE_RULES
from controlplane.apiserver.rbac.rules import allows, compile_rules
from controlplane.apiserver.userinfo import UserInfo

NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
NODE_LEASE_NAMESPACE = "kube-node-lease"
ALLOW = Decision(True)


def node_identity(user: UserInfo | None) -> tuple[str, bool]:
    """NodeIdentity: (node name, is a node). A node name is "" if it cannot be told."""
    if user is None or not user.name.startswith(NODE_PREFIX) or NODES_GROUP not in user.groups:
        return "", False
    return user.name[len(NODE_PREFIX) :], True


class NodeAuthorizer:
    def __init__(self, graph: NodeGraph) -> None:
        self.graph = graph
        self.rules = compile_rules(NODE_RULES)

    def authorize(self, attrs: Attributes) -> Decision | None:
        node, is_node = node_identity(attrs.user)
        if not is_node:
            return None
        if not node:
            return no_opinion(f'unknown node for user "{attrs.user.name}"')
        if attrs.resource_request:
            special = self._subdivided(node, attrs)
            if special is not None:
                return special
        return ALLOW if allows(attrs, self.rules) else None

    def _subdivided(self, node: str, attrs: Attributes) -> Decision | None:
        if attrs.api_group == "":
            match attrs.resource:
                case "secrets":
                    return self._read_namespaced(node, SECRET, attrs)
                case "configmaps":
                    return self._read_namespaced(node, CONFIGMAP, attrs)
                case "persistentvolumeclaims":
                    if attrs.subresource == "status":
                        return self._status_update(node, PVC, attrs)
                    return self._get(node, PVC, attrs)
                case "persistentvolumes":
                    return self._get(node, PV, attrs)
                case "serviceaccounts":
                    return self._create_token(node, attrs)
                case "nodes":
                    return self._node(node, attrs)
                case "pods":
                    return self._pod(node, attrs)
        elif attrs.api_group == "coordination.k8s.io" and attrs.resource == "leases":
            return self._lease(node, attrs)
        return None

    # --- the subdivided resources --------------------------------------------------------------------

    def _related(self, node: str, kind: str, attrs: Attributes) -> Decision:
        """authorize: the named object must be reachable from the node."""
        if not attrs.name:
            return no_opinion("No Object name found")
        if self.graph.has_path(node, kind, attrs.namespace, attrs.name):
            return ALLOW
        return no_opinion(f"no relationship found between node '{node}' and this object")

    def _read_namespaced(self, node: str, kind: str, attrs: Attributes) -> Decision:
        if attrs.verb not in ("get", "list", "watch"):
            return no_opinion("can only read resources of this type")
        if attrs.subresource:
            return no_opinion("cannot read subresource")
        if not attrs.namespace:
            return no_opinion("can only read namespaced object of this type")
        return self._related(node, kind, attrs)

    def _get(self, node: str, kind: str, attrs: Attributes) -> Decision:
        if attrs.verb != "get":
            return no_opinion("can only get individual resources of this type")
        if attrs.subresource:
            return no_opinion("cannot get subresource")
        return self._related(node, kind, attrs)

    def _status_update(self, node: str, kind: str, attrs: Attributes) -> Decision:
        if attrs.verb not in ("update", "patch"):
            return no_opinion("can only get/update/patch this type")
        return self._related(node, kind, attrs)

    def _create_token(self, node: str, attrs: Attributes) -> Decision:
        if attrs.verb != "create" or not attrs.name:
            return no_opinion("can only create tokens for individual service accounts")
        if attrs.subresource != "token":
            return no_opinion("can only create token subresource of serviceaccount")
        return self._related(node, SERVICE_ACCOUNT, attrs)

    def _lease(self, node: str, attrs: Attributes) -> Decision:
        if attrs.verb not in ("get", "create", "update", "patch", "delete"):
            return no_opinion("can only get, create, update, patch, or delete a node lease")
        if attrs.namespace != NODE_LEASE_NAMESPACE:
            return no_opinion(f'can only access leases in the "{NODE_LEASE_NAMESPACE}" system namespace')
        if attrs.verb != "create" and attrs.name != node:
            return no_opinion("can only access node lease with the same name as the requesting node")
        return ALLOW

    def _node(self, node: str, attrs: Attributes) -> Decision:
        """authorizeNode: write its own Node (NodeRestriction checks which), read only that one."""
        if attrs.subresource == "":
            if attrs.verb in ("create", "update", "patch"):
                return ALLOW
            if attrs.verb in ("get", "list", "watch"):
                if attrs.name == node:
                    return ALLOW
                if not attrs.name:
                    return no_opinion(f"node '{node}' cannot read all nodes, only its own Node object")
                return no_opinion(f"node '{node}' cannot read '{attrs.name}', only its own Node object")
        elif attrs.subresource == "status" and attrs.verb in ("update", "patch"):
            return ALLOW
        return no_opinion()

    def _pod(self, node: str, attrs: Attributes) -> Decision:
        """authorizePod: its own pods, and the pods it creates or deletes (NodeRestriction checks which)."""
        if attrs.subresource == "":
            if attrs.verb == "get":
                return self._get(node, POD, attrs)
            if attrs.verb in ("list", "watch"):
                if exact_field(attrs.field_selector, "spec.nodeName") == node:
                    return ALLOW
                if attrs.name:
                    return self._related(node, POD, attrs)
                return no_opinion("can only list/watch pods with spec.nodeName field selector")
            if attrs.verb in ("create", "delete"):
                return ALLOW
        elif attrs.subresource == "status" and attrs.verb in ("update", "patch"):
            return ALLOW
        elif attrs.subresource == "eviction" and attrs.verb == "create":
            return ALLOW
        return no_opinion()

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        """Nodes' permissions cannot be listed (upstream says so with an error)."""
        if node_identity(user)[1]:
            return RuleSet(incomplete=True, errors=["node authorizer does not support user rule resolution"])
        return RuleSet()


__all__ = ["NODES_GROUP", "NODE_PREFIX", "NodeAuthorizer", "node_identity"]
