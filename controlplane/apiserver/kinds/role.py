"""rbac.authorization.k8s.io/v1 Role: a namespace's rules, granted by RoleBindings in that namespace.
Its rules are validated as upstream's (no non-resource URLs in a namespace), and nobody can write a
role granting what they do not hold (apiserver/rbac/escalation.py)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.rbacshared import GROUP
from controlplane.apiserver.rbac import validation
from controlplane.apiserver.rbac.escalation import RoleEscalation

Obj = dict[str, Any]


class Role(Kind):
    group = GROUP
    kind = "Role"
    plural = "roles"
    schema = "V1Role"
    admission = (RoleEscalation("roles"),)

    def default(self, obj: Obj, creating: bool) -> None:
        # Go writes the field without omitempty: a role without rules says `rules: null`.
        obj.setdefault("rules", None)

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return validation.role_name(path, name)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validation.rules(obj, namespaced=True)


KIND = Role()
