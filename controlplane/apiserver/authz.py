"""Authorization between authentication and admission: the attributes a request is judged on, the
authorizers' decisions, the chain that asks them in turn (upstream's union authorizer), and the
Forbidden answer the API gives when nobody allowed the request.

Authorizers answer Allow, Deny or no opinion (with an optional reason); the first to allow or deny
decides, and a request no authorizer allows is refused with every reason given appended to the
message, as upstream's WithAuthorization filter writes it. Which authorizers make up the chain is
`--authorization-mode` (authmodes.py: Node, RBAC, AlwaysAllow).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from controlplane.apiserver import errors
from controlplane.apiserver.userinfo import UserInfo


@dataclass(frozen=True, slots=True)
class Attributes:
    """What an authorizer decides on (upstream's authorizer.Attributes): who, which verb, which object."""

    user: UserInfo
    verb: (
        str  # get list watch create update patch delete deletecollection ..., or the HTTP verb in lower case
    )
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""
    resource_request: bool = True
    field_selector: str = ""  # list/watch: the raw fieldSelector (the Node authorizer reads spec.nodeName)


@dataclass(frozen=True, slots=True)
class Decision:
    """Allow (`allowed`), Deny (not allowed, `opinion`), or no opinion (neither; the next authorizer asks)."""

    allowed: bool
    reason: str = ""
    opinion: bool = True


def no_opinion(reason: str = "") -> Decision:
    return Decision(False, reason, opinion=False)


@dataclass(frozen=True)
class ResourceRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class NonResourceRule:
    verbs: tuple[str, ...]
    non_resource_urls: tuple[str, ...] = ()


@dataclass
class RuleSet:
    """What a user may do in a namespace, as far as the authorizers can tell (SelfSubjectRulesReview)."""

    resource_rules: list[ResourceRule] = field(default_factory=list)
    non_resource_rules: list[NonResourceRule] = field(default_factory=list)
    incomplete: bool = False
    errors: list[str] = field(default_factory=list)


class Authorizer(Protocol):
    def authorize(self, attrs: Attributes) -> Decision | None:
        """Allow or deny; None or `no_opinion(reason)` lets the next authorizer decide."""
        ...


class AllowAll:
    """--authorization-mode=AlwaysAllow: every authenticated request is allowed."""

    def authorize(self, attrs: Attributes) -> Decision | None:
        return Decision(True)

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        return RuleSet([ResourceRule(("*",), ("*",), ("*",))], [NonResourceRule(("*",), ("*",))])


class AuthorizerChain:
    """First authorizer with an opinion wins; no opinion from anyone is a refusal carrying every reason
    given (joined by newlines), as upstream's union authorizer."""

    def __init__(self, authorizers: list[Authorizer]) -> None:
        self.authorizers = authorizers

    def authorize(self, attrs: Attributes) -> Decision:
        reasons: list[str] = []
        for authorizer in self.authorizers:
            decision = authorizer.authorize(attrs)
            if decision is None:
                continue
            if decision.opinion or decision.allowed:
                return decision
            if decision.reason:
                reasons.append(decision.reason)
        return no_opinion("\n".join(reasons))

    def rules_for(self, user: UserInfo, namespace: str) -> RuleSet:
        """The union of what each authorizer that can list rules says (upstream's unionAuthzRulesHandler)."""
        out = RuleSet()
        for authorizer in self.authorizers:
            rules_for = getattr(authorizer, "rules_for", None)
            if rules_for is None:
                continue
            part: RuleSet = rules_for(user, namespace)
            out.resource_rules += part.resource_rules
            out.non_resource_rules += part.non_resource_rules
            out.incomplete = out.incomplete or part.incomplete
            out.errors += part.errors
        return out


def forbidden_message(attrs: Attributes) -> str:
    """Upstream's forbiddenMessage: `User "alice" cannot list resource "pods" in API group "" in the
    namespace "demo"` (or `at the cluster scope`, or `cannot get path "/apis"`)."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" {where}'


def forbidden(attrs: Attributes, reason: str) -> errors.ApiError:
    """The 403 for a request no authorizer allowed (responsewriters.Forbidden): `pods is forbidden: ...`,
    `pods "web" is forbidden: ...`, or for a path `forbidden: ...`; the authorizers' reasons follow."""
    message = forbidden_message(attrs) + (f": {reason}" if reason else "")
    if not attrs.resource_request or not attrs.resource:
        return errors.ApiError(403, "Forbidden", f"forbidden: {message}", {})
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return errors.forbidden_request(
        f"{subject} is forbidden: {message}", attrs.resource, attrs.api_group, attrs.name
    )


def exact_field(selector: str, name: str) -> str | None:
    """The value a field selector requires `name` to equal (`metadata.name=x` or `==`), if it does."""
    for term in selector.split(","):
        key, sep, value = term.partition("==")
        if not sep:
            key, sep, value = term.partition("=")
        if sep and not key.endswith("!") and key.strip() == name:
            return value.strip()
    return None


__all__ = [
    "AllowAll",
    "Attributes",
    "Authorizer",
    "AuthorizerChain",
    "Decision",
    "NonResourceRule",
    "ResourceRule",
    "RuleSet",
    "exact_field",
    "forbidden",
    "forbidden_message",
    "no_opinion",
]
