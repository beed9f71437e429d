"""What the four RBAC kinds share: their protobuf messages (kubectl create role|clusterrole|rolebinding|
clusterrolebinding send protobuf), the bindings' table (upstream's printRoleBinding) and the hooks
each kind wires to the validation and escalation checks in apiserver/rbac/."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.meta import age
from controlplane.apiserver.protobuf import LABEL_SELECTOR, OBJECT_META

Obj = dict[str, Any]
GROUP = "rbac.authorization.k8s.io"

POLICY_RULE = {
    1: ("verbs", "strings", None),
    2: ("apiGroups", "strings", None),
    3: ("resources", "strings", None),
    4: ("resourceNames", "strings", None),
    5: ("nonResourceURLs", "strings", None),
}
ROLE_PROTOBUF = {1: ("metadata", "message", OBJECT_META), 2: ("rules", "messages", POLICY_RULE)}
CLUSTER_ROLE_PROTOBUF = {
    **ROLE_PROTOBUF,
    3: ("aggregationRule", "message", {1: ("clusterRoleSelectors", "messages", LABEL_SELECTOR)}),
}
SUBJECT = {
    1: ("kind", "string", None),
    2: ("apiGroup", "string", None),
    3: ("name", "string", None),
    4: ("namespace", "string", None),
}
ROLE_REF = {1: ("apiGroup", "string", None), 2: ("kind", "string", None), 3: ("name", "string", None)}
BINDING_PROTOBUF = {
    1: ("metadata", "message", OBJECT_META),
    2: ("subjects", "messages", SUBJECT),
    3: ("roleRef", "message", ROLE_REF),
}


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
