"""Whether one set of rules covers another (upstream's validation.Covers), and the escalation message
that lists what is not covered (CompactRules and rbacv1helpers.CompactString).

Escalation prevention asks this: may a user who holds `owner` rules create a role (or a binding to a
role) granting `servant` rules? Every servant rule is broken down into atoms of one verb, one group,
one resource and one name (or one verb and one URL); each atom must be covered by a single owner rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from controlplane.apiserver.rbac.rules import ALL, PolicyRule


def breakdown(rule: PolicyRule) -> list[PolicyRule]:
    """breakdownRule: the atoms of a rule."""
    out: list[PolicyRule] = []
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    out += [
                        PolicyRule((verb,), (group,), (resource,), (name,)) for name in rule.resource_names
                    ]
                else:
                    out.append(PolicyRule((verb,), (group,), (resource,)))
    for url in rule.non_resource_urls:
        out += [PolicyRule((verb,), non_resource_urls=(url,)) for verb in rule.verbs]
    return out


def _url_covers(owner: str, path: str) -> bool:
    return owner == path or (owner.endswith("*") and path.startswith(owner.rstrip("*")))


def rule_covers(owner: PolicyRule, sub: PolicyRule) -> bool:
    """ruleCovers: `owner` (any shape) covers `sub` (an atom)."""
    if not (ALL in owner.verbs or set(sub.verbs) <= set(owner.verbs)):
        return False
    if not (ALL in owner.api_groups or set(sub.api_groups) <= set(owner.api_groups)):
        return False
    if not (ALL in owner.resources or set(sub.resources) <= set(owner.resources)):
        return False
    if not all(any(_url_covers(o, p) for o in owner.non_resource_urls) for p in sub.non_resource_urls):
        return False
    if not sub.resource_names:
        return not owner.resource_names
    return not owner.resource_names or set(sub.resource_names) <= set(owner.resource_names)


def covers(owner: Iterable[PolicyRule], servant: Iterable[PolicyRule]) -> tuple[bool, list[PolicyRule]]:
    """Covers: (every atom of `servant` covered by some rule of `owner`, the atoms that are not)."""
    owners = list(owner)
    missing = [
        atom for rule in servant for atom in breakdown(rule) if not any(rule_covers(o, atom) for o in owners)
    ]
    return not missing, missing


def compact(rules: list[PolicyRule]) -> list[PolicyRule]:
    """CompactRules: rules of one group and one resource (and nothing else) that differ only by verb
    become one rule with all their verbs."""
    out: list[PolicyRule] = []
    simple: dict[tuple[str, str], list[str]] = {}
    for r in rules:
        if (
            not r.resource_names
            and not r.non_resource_urls
            and len(r.api_groups) == 1
            and len(r.resources) == 1
        ):
            simple.setdefault((r.api_groups[0], r.resources[0]), []).extend(r.verbs)
        else:
            out.append(r)
    out += [PolicyRule(tuple(verbs), (group,), (resource,)) for (group, resource), verbs in simple.items()]
    return out


def go_quote(values: Iterable[str]) -> str:
    """Go's %q of a []string: `["a" "b"]`."""
    return "[" + " ".join(json.dumps(v, ensure_ascii=False) for v in values) + "]"


def compact_string(rule: PolicyRule) -> str:
    """CompactString: `{APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]}`."""
    parts = []
    for label, values in (
        ("APIGroups", rule.api_groups),
        ("Resources", rule.resources),
        ("NonResourceURLs", rule.non_resource_urls),
        ("ResourceNames", rule.resource_names),
        ("Verbs", rule.verbs),
    ):
        if values:
            parts.append(f"{label}:{go_quote(values)}")
    return "{" + ", ".join(parts) + "}"


def escalation_message(
    user: str, groups: Iterable[str], missing: list[PolicyRule], resolution_errors: list[str]
) -> str:
    """ConfirmNoEscalation's error text."""
    described = sorted({compact_string(r) for r in compact(missing)})
    message = (
        f'user "{user}" (groups={go_quote(groups)}) is attempting to grant RBAC permissions not currently '
        "held:\n" + "\n".join(described)
    )
    if resolution_errors:
        message += f"; resolution errors: [{' '.join(resolution_errors)}]"
    return message


FULL_AUTHORITY = (PolicyRule((ALL,), (ALL,), (ALL,)), PolicyRule((ALL,), non_resource_urls=(ALL,)))

__all__ = [
    "FULL_AUTHORITY",
    "breakdown",
    "compact",
    "compact_string",
    "covers",
    "escalation_message",
    "go_quote",
    "rule_covers",
]
