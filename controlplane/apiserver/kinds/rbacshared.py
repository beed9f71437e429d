"""What the four RBAC kinds share: their protobuf messages (kubectl create role|clusterrole|rolebinding|
clusterrolebinding send protobuf), the bindings' table (upstream's printRoleBinding) and the hooks
each kind wires to the validation and escalation checks in apiserver/rbac/."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.meta import age

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"


def binding_columns(role_ref_doc: str) -> tuple[tables.Column, ...]:
    return (
        tables.NAME,
        tables.column("Role", desc=role_ref_doc),
        tables.AGE,
        tables.column("Users", 1, desc="Users in the roleBinding"),
        tables.column("Groups", 1, desc="Groups in the roleBinding"),
        tables.column("ServiceAccounts", 1, desc="ServiceAccounts in the roleBinding"),
    )


def binding_cells(obj: Obj) -> list[Any]:
    """printRoleBinding: name, Kind/name of the role, age, and (wide) users, groups, ns/serviceaccounts."""
    ref = obj.get("roleRef") or {}
    users, groups, accounts = [], [], []
    for s in obj.get("subjects") or []:
        kind = s.get("kind")
        if kind == "ServiceAccount":
            accounts.append(f"{s.get('namespace', '')}/{s.get('name', '')}")
        elif kind == "User":
            users.append(s.get("name", ""))
        elif kind == "Group":
            groups.append(s.get("name", ""))
    return [
        obj["metadata"].get("name"),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        age(obj),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]
