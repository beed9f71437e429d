"""rbac.authorization.k8s.io/v1 RoleBinding: grants a Role of its namespace, or a ClusterRole within its
namespace, to users, groups and service accounts. roleRef is immutable; binding a role whose rules one
does not hold needs the `bind` verb on it (apiserver/rbac/escalation.py)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.rbacshared import GROUP, binding_cells, binding_columns
from controlplane.apiserver.rbac import validation
from controlplane.apiserver.rbac.escalation import BindingEscalation

Obj = dict[str, Any]


class RoleBinding(Kind):
    group = GROUP
    kind = "RoleBinding"
    plural = "rolebindings"
    schema = "V1RoleBinding"
    admission = (BindingEscalation("rolebindings"),)
    columns = binding_columns(
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global "
        "namespace. If the RoleRef cannot be resolved, the Authorizer must return an error. This "
        "field is immutable."
    )

    def default(self, obj: Obj, creating: bool) -> None:
        validation.default_binding(obj)

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return validation.role_name(path, name)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.role_ref(obj.get("roleRef"), ["Role", "ClusterRole"]) + validation.subjects(
            obj, namespaced=True
        )

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return validation.role_ref_unchanged(new, old)

    def cells(self, obj: Obj) -> list[Any]:
        return binding_cells(obj)


KIND = RoleBinding()
