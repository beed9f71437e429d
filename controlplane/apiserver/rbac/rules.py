"""RBAC policy rules and how a request matches one (upstream's rbac.RuleAllows and the rbacv1helpers
matchers): verbs, API groups, resources with `*` and `*/subresource`, resource names, and non-resource
URLs with a trailing `*`.

A rule is parsed once, when its role is stored, into a `Rule` whose sets make each check a lookup;
the authorizer then runs nothing but these checks per request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver.authz import Attributes

ALL = "*"
Obj = dict[str, Any]

_FIELDS = (
    ("verbs", "verbs"),
    ("api_groups", "apiGroups"),
    ("resources", "resources"),
    ("resource_names", "resourceNames"),
    ("non_resource_urls", "nonResourceURLs"),
)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str))


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """rbacv1.PolicyRule, in the field order upstream's messages print it."""

    verbs: tuple[str, ...] = ()
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def parse(cls, obj: Any) -> PolicyRule:
        if not isinstance(obj, dict):
            return cls()
        return cls(*(_strings(obj.get(key)) for _, key in _FIELDS))

    def to_dict(self) -> Obj:
        """The JSON form (verbs always, the rest when set: Go's omitempty)."""
        out: Obj = {"verbs": list(self.verbs)}
        for attr, key in _FIELDS[1:]:
            value = getattr(self, attr)
            if value:
                out[key] = list(value)
        return out


def rule(
    verbs: Iterable[str],
    groups: Iterable[str] = (),
    resources: Iterable[str] = (),
    names: Iterable[str] = (),
    urls: Iterable[str] = (),
) -> PolicyRule:
    """Upstream's rbacv1helpers.NewRule(...).Groups(...).Resources(...).Names(...).URLs(...).RuleOrDie(),
    which sorts each list."""
    return PolicyRule(*(tuple(sorted(v)) for v in (verbs, groups, resources, names, urls)))


def parse_rules(value: Any) -> tuple[PolicyRule, ...]:
    return tuple(PolicyRule.parse(r) for r in value) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class Rule:
    """A PolicyRule compiled for matching. None stands for `*` (everything)."""

    source: PolicyRule
    verbs: frozenset[str] | None
    groups: frozenset[str] | None
    resources: frozenset[str] | None
    any_subresource_of: frozenset[str] = field(default_factory=frozenset)  # from `*/status`: {"status"}
    names: frozenset[str] | None = None  # None: any name
    urls: frozenset[str] | None = frozenset()  # None: every path
    url_prefixes: tuple[str, ...] = ()

    @classmethod
    def compile(cls, source: PolicyRule) -> Rule:
        def wild(values: tuple[str, ...]) -> frozenset[str] | None:
            return None if ALL in values else frozenset(values)

        urls = source.non_resource_urls
        return cls(
            source,
            wild(source.verbs),
            wild(source.api_groups),
            wild(source.resources),
            frozenset(r[2:] for r in source.resources if r.startswith("*/") and len(r) > 2),
            frozenset(source.resource_names) if source.resource_names else None,
            None if ALL in urls else frozenset(u for u in urls if not u.endswith("*")),
            tuple(u.rstrip("*") for u in urls if u.endswith("*") and u != ALL),
        )

    def allows(self, attrs: Attributes) -> bool:
        """RuleAllows."""
        if self.verbs is not None and attrs.verb not in self.verbs:
            return False
        if attrs.resource_request:
            if self.groups is not None and attrs.api_group not in self.groups:
                return False
            if not self.matches_resource(attrs.resource, attrs.subresource):
                return False
            return self.names is None or attrs.name in self.names
        return self.matches_url(attrs.path)

    def matches_resource(self, resource: str, subresource: str) -> bool:
        """ResourceMatches: `*`, the exact `resource[/subresource]`, or `*/subresource`."""
        if self.resources is None:
            return True
        if not subresource:
            return resource in self.resources
        return f"{resource}/{subresource}" in self.resources or subresource in self.any_subresource_of

    def matches_url(self, path: str) -> bool:
        """NonResourceURLMatches: `*`, the exact path, or a prefix ending in `*`."""
        if self.urls is None:
            return True
        return path in self.urls or any(path.startswith(p) for p in self.url_prefixes)


def compile_rules(rules: Iterable[PolicyRule]) -> tuple[Rule, ...]:
    return tuple(Rule.compile(r) for r in rules)


def allows(attrs: Attributes, rules: Iterable[Rule]) -> bool:
    """RulesAllow: any rule allows."""
    return any(r.allows(attrs) for r in rules)


__all__ = ["ALL", "PolicyRule", "Rule", "allows", "compile_rules", "parse_rules", "rule"]
