"""The RBAC authorizer (upstream's plugin/pkg/auth/authorizer/rbac) and the privileged-group authorizer
the server puts before it (system:masters may do anything, whatever the RBAC objects say).

RBAC only allows or has no opinion: a request no rule allows gets no opinion, with the resolution
errors of the bindings that named the user as its reason (`RBAC: clusterrole.rbac.authorization.k8s.io
"x" not found`), so the next authorizer may still allow it and the final 403 explains the refusal.
"""

from __future__ import annotations

from controlplane.apiserver.authz import (
    Attributes,
    Decision,
    NonResourceRule,
    ResourceRule,
    RuleSet,
    no_opinion,
)
from controlplane.apiserver.rbac.resolver import RuleResolver
from controlplane.apiserver.userinfo import UserInfo

SYSTEM_MASTERS = "system:masters"


def aggregate(errors: tuple[str, ...] | list[str]) -> str:
    """utilerrors.NewAggregate's text: one error as is, several as `[a, b]`."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


class RBACAuthorizer:
    def __init__(self, resolver: RuleResolver) -> None:
        self.resolver = resolver

    def authorize(self, attrs: Attributes) -> Decision:
        resolved = self.resolver.resolve(attrs.user, attrs.namespace)
        for grant in resolved.grants:
            if grant.rule.allows(attrs):
                return Decision(True, f"RBAC: allowed by {grant.source}")
        return no_opinion(f"RBAC: {aggregate(resolved.errors)}" if resolved.errors else "")

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        rules, errors = self.resolver.rules_for(user, namespace)
        out = RuleSet(errors=[aggregate(errors)] if errors else [])
        for r in rules:
            if r.resources:
                out.resource_rules.append(ResourceRule(r.verbs, r.api_groups, r.resources, r.resource_names))
            if r.non_resource_urls:
                out.non_resource_rules.append(NonResourceRule(r.verbs, r.non_resource_urls))
        return out


class PrivilegedGroups:
    """authorizerfactory.NewPrivilegedGroups(system:masters): members are allowed everything."""

    def __init__(self, groups: tuple[str, ...] = (SYSTEM_MASTERS,)) -> None:
        self.groups = frozenset(groups)

    def authorize(self, attrs: Attributes) -> Decision | None:
        if not self.groups.isdisjoint(attrs.user.groups):
            return Decision(True)
        return None


__all__ = ["SYSTEM_MASTERS", "PrivilegedGroups", "RBACAuthorizer", "aggregate"]
