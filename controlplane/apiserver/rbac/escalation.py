"""Escalation prevention (upstream's pkg/registry/rbac/*/policybased and validation.ConfirmNoEscalation):
nobody can create or change a role granting what they do not hold themselves, nor bind a role whose
rules they do not hold, unless they may `escalate` roles (for roles) or `bind` that role (for
bindings). Members of system:masters and the server itself (no user) always may. An aggregation rule
can gather anything, so it takes full authority.

Each RBAC kind declares one of these plugins; they run in admission's first phase, before the kind's
validation, where upstream's storage wrapper checks.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from controlplane.apiserver import errors
from controlplane.apiserver.authz import Attributes, RuleSet
from controlplane.apiserver.rbac.authorizer import SYSTEM_MASTERS
from controlplane.apiserver.rbac.covers import FULL_AUTHORITY, covers, escalation_message
from controlplane.apiserver.rbac.resolver import GROUP
from controlplane.apiserver.rbac.rules import PolicyRule, parse_rules
from controlplane.apiserver.userinfo import UserInfo

if TYPE_CHECKING:
    from controlplane.apiserver.authz import AuthorizerChain
    from controlplane.apiserver.kinds.ports import AdmissionRequest

Obj = dict[str, Any]


def escalation_allowed(user: UserInfo | None) -> bool:
    """EscalationAllowed: the server's own writes, and system:masters."""
    return user is None or SYSTEM_MASTERS in user.groups


def only_gc_fields(new: Obj, old: Obj | None) -> bool:
    """IsOnlyMutatingGCFields: the change touches nothing but owner references and finalizers."""
    if old is None:
        return False
    copied = copy.deepcopy(new)
    meta, old_meta = copied.setdefault("metadata", {}), old.get("metadata") or {}
    for field in ("ownerReferences", "finalizers", "managedFields", "selfLink"):
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    return copied == old


def held_rules(chain: AuthorizerChain, user: UserInfo, namespace: str) -> tuple[list[PolicyRule], list[str]]:
    """RulesFor, as policy rules."""
    held: RuleSet = chain.rules_for(user, namespace)
    rules = [PolicyRule(r.verbs, r.api_groups, r.resources, r.resource_names) for r in held.resource_rules]
    rules += [PolicyRule(r.verbs, non_resource_urls=r.non_resource_urls) for r in held.non_resource_rules]
    return rules, held.errors


def confirm_no_escalation(
    chain: AuthorizerChain | None, user: UserInfo, namespace: str, wanted: tuple[PolicyRule, ...]
) -> str | None:
    """None when the user holds every rule in `wanted`; else ConfirmNoEscalation's message."""
    owner, resolution_errors = held_rules(chain, user, namespace) if chain is not None else ([], [])
    ok, missing = covers(owner, wanted)
    return None if ok else escalation_message(user.name, user.groups, missing, resolution_errors)


def _chain(request: AdmissionRequest) -> AuthorizerChain | None:
    authorization = request.registry.authorization
    return authorization.chain if authorization is not None else None


def _authorized(chain: AuthorizerChain | None, attrs: Attributes) -> bool:
    return chain is not None and chain.authorize(attrs).allowed


class _Plugin:
    def __init__(self, plural: str) -> None:
        self.plural = plural

    def _applies(self, request: AdmissionRequest) -> bool:
        return (
            request.kind.plural == self.plural
            and request.kind.group == GROUP
            and not request.subresource
            and request.operation in ("CREATE", "UPDATE")
        )

    def _forbidden(self, name: str, message: str) -> errors.ApiError:
        return errors.forbidden_request(
            f'{self.plural}.{GROUP} "{name}" is forbidden: {message}', self.plural, GROUP, name
        )


class RoleEscalation(_Plugin):
    """Roles and ClusterRoles: the rules written must be held, unless the writer may `escalate`."""

    def admit(self, request: AdmissionRequest) -> None:
        if not self._applies(request) or escalation_allowed(request.user):
            return
        assert request.user is not None
        chain = _chain(request)
        if request.operation == "UPDATE" and only_gc_fields(request.obj, request.old):
            return
        escalate = Attributes(
            request.user, "escalate", GROUP, "*", self.plural, "", request.namespace, request.name
        )
        if _authorized(chain, escalate):
            return
        refused = confirm_no_escalation(
            chain, request.user, request.namespace, parse_rules(request.obj.get("rules"))
        )
        if refused:
            raise self._forbidden(request.name, refused)
        aggregated = (
            request.obj.get("aggregationRule") is not None
            or (request.old or {}).get("aggregationRule") is not None
        )
        if aggregated and confirm_no_escalation(chain, request.user, request.namespace, FULL_AUTHORITY):
            raise self._forbidden(
                request.name, "must have cluster-admin privileges to use the aggregationRule"
            )


class BindingEscalation(_Plugin):
    """RoleBindings and ClusterRoleBindings: the role's rules must be held, unless the writer may `bind` it."""

    def admit(self, request: AdmissionRequest) -> None:
        if not self._applies(request) or escalation_allowed(request.user):
            return
        assert request.user is not None
        if request.operation == "UPDATE" and only_gc_fields(request.obj, request.old):
            return
        chain = _chain(request)
        ref = request.obj.get("roleRef") or {}
        kind, role_name = ref.get("kind") or "", ref.get("name") or ""
        resource = {"ClusterRole": "clusterroles", "Role": "roles"}.get(kind)
        if resource is None:
            return  # validation refuses the kind
        bind = Attributes(
            request.user, "bind", ref.get("apiGroup") or "", "", resource, "", request.namespace, role_name
        )
        if _authorized(chain, bind):
            return
        authorization = request.registry.authorization
        rules = (
            authorization.resolver.role_sources_of(kind, request.namespace, role_name)
            if authorization
            else None
        )
        if rules is None:
            raise errors.not_found(resource, GROUP, role_name)
        refused = confirm_no_escalation(chain, request.user, request.namespace, rules)
        if refused:
            raise self._forbidden(request.name, refused)


__all__ = [
    "BindingEscalation",
    "RoleEscalation",
    "confirm_no_escalation",
    "escalation_allowed",
    "only_gc_fields",
]
