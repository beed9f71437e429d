"""The bootstrap policy's namespaced roles and bindings (upstream's bootstrappolicy/namespace_policy.go):
leader locking for the scheduler and the controller manager, the extension-apiserver-authentication
reader, and the bootstrap-signer, cloud-provider and token-cleaner controllers' roles, in kube-system
and kube-public."""

from __future__ import annotations

from controlplane.apiserver.rbac.policy import API_VERSION as RBAC_API_VERSION
from controlplane.apiserver.rbac.policy import (
    COORDINATION,
    CORE,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    READ,
    Obj,
    binding,
    events_rule,
    metadata,
    subject,
    users,
)
from controlplane.apiserver.rbac.rules import PolicyRule, rule

SYSTEM, PUBLIC = "kube-system", "kube-public"
_LOCKING = ("create", "get", "list", "update", "watch")


def role(namespace: str, name: str, rules: list[PolicyRule]) -> Obj:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": metadata(name, namespace),
        "rules": [r.to_dict() for r in rules],
    }


def _sa(name: str) -> Obj:
    return subject("ServiceAccount", name, SYSTEM)


def namespace_roles() -> list[Obj]:
    leader_locking = [
        rule(_LOCKING, (COORDINATION,), ("leases",)),
        rule(_LOCKING, (COORDINATION,), ("leasecandidates",)),
    ]
    return [
        role(
            SYSTEM,
            "extension-apiserver-authentication-reader",
            [rule(READ, (CORE,), ("configmaps",), ("extension-apiserver-authentication",))],
        ),
        role(SYSTEM, "system::leader-locking-kube-controller-manager", leader_locking),
        role(SYSTEM, "system::leader-locking-kube-scheduler", leader_locking),
        role(SYSTEM, "system:controller:bootstrap-signer", [rule(READ, (CORE,), ("secrets",))]),
        role(
            SYSTEM,
            "system:controller:cloud-provider",
            [rule(("create", "get", "list", "watch"), (CORE,), ("configmaps",))],
        ),
        role(
            SYSTEM,
            "system:controller:token-cleaner",
            [rule(("delete", *READ), (CORE,), ("secrets",)), events_rule()],
        ),
        role(
            PUBLIC,
            "system:controller:bootstrap-signer",
            [
                rule(READ, (CORE,), ("configmaps",)),
                rule(("update",), (CORE,), ("configmaps",), ("cluster-info",)),
                events_rule(),
            ],
        ),
    ]


def namespace_role_bindings() -> list[Obj]:
    def bind(namespace: str, name: str, role_name: str, *subjects: Obj) -> Obj:
        return binding("RoleBinding", name, "Role", role_name, list(subjects), namespace)

    return [
        bind(
            SYSTEM,
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            *users(KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER),
        ),
        bind(
            SYSTEM,
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            *users(KUBE_CONTROLLER_MANAGER),
            _sa("kube-controller-manager"),
            _sa("leader-election-controller"),
        ),
        bind(
            SYSTEM,
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            *users(KUBE_SCHEDULER),
            _sa("kube-scheduler"),
        ),
        bind(
            SYSTEM,
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            _sa("bootstrap-signer"),
        ),
        bind(
            SYSTEM,
            "system:controller:cloud-provider",
            "system:controller:cloud-provider",
            _sa("cloud-provider"),
        ),
        bind(
            SYSTEM, "system:controller:token-cleaner", "system:controller:token-cleaner", _sa("token-cleaner")
        ),
        bind(
            PUBLIC,
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            _sa("bootstrap-signer"),
        ),
    ]


__all__ = ["namespace_role_bindings", "namespace_roles"]
