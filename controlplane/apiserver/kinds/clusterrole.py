"""rbac.authorization.k8s.io/v1 ClusterRole: rules for the whole cluster (or, bound by a RoleBinding, for
one namespace), optionally aggregated from other cluster roles by label (the clusterrole-aggregation
controller writes those rules). The server creates and reconciles the bootstrap policy at every start
(apiserver/rbac/reconcile.py); writing rules one does not hold, or an aggregation rule without full
authority, is refused (apiserver/rbac/escalation.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.rbacshared import GROUP
from controlplane.apiserver.rbac import validation
from controlplane.apiserver.rbac.escalation import RoleEscalation

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.ports import Registry

Obj = dict[str, Any]


class ClusterRole(Kind):
    group = GROUP
    kind = "ClusterRole"
    plural = "clusterroles"
    namespaced = False
    schema = "V1ClusterRole"
    admission = (RoleEscalation("clusterroles"),)

    def default(self, obj: Obj, creating: bool) -> None:
        # Go writes the field without omitempty: a role without rules says `rules: null`.
        obj.setdefault("rules", None)

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return validation.role_name(path, name)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.rules(obj, namespaced=False) + validation.aggregation_rule(obj)

    async def bootstrap(self, registry: Registry) -> None:
        """The bootstrap policy, all four kinds (roles first), created or reconciled."""
        from controlplane.apiserver.kinds import clusterrolebinding, rolebinding
        from controlplane.apiserver.kinds import role as role_kind
        from controlplane.apiserver.rbac.policy import server_cluster_role_bindings
        from controlplane.apiserver.rbac.reconcile import PolicyKinds, ensure_policy

        kinds = PolicyKinds(role_kind.KIND, self, rolebinding.KIND, clusterrolebinding.KIND)
        await ensure_policy(registry, kinds, server_cluster_role_bindings())


KIND = ClusterRole()
