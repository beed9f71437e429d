"""Defaulting and validation of FlowSchemas and PriorityLevelConfigurations, as upstream's
pkg/apis/flowcontrol/v1 defaults and pkg/apis/flowcontrol/validation (messages and field paths kept),
so a bad configuration is refused with a 422 naming the field instead of reaching the dispatcher."""

from __future__ import annotations

import math
from typing import Any

from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.flowcontrol.defaults import EXEMPT
from controlplane.apiserver.validation import dns_subdomain

Obj = dict[str, Any]

MAX_PRECEDENCE = 10000
RESOURCE_VERBS = ["get", "list", "create", "update", "delete", "deletecollection", "patch", "watch", "proxy"]
SUBJECT_KINDS = ["Group", "ServiceAccount", "User"]
DISTINGUISHERS = ["ByNamespace", "ByUser"]
LEVEL_TYPES = ["Exempt", "Limited"]
RESPONSE_TYPES = ["Queue", "Reject"]
MAX_HASH_BITS = 60  # the shuffle sharding dealer's entropy budget
DEFAULT_SHARES = 30


# --- defaulting ------------------------------------------------------------------------------------


def default_flow_schema(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    if not spec.get("matchingPrecedence"):
        spec["matchingPrecedence"] = 1000


def default_priority_level(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    limited = spec.get("limited")
    if isinstance(limited, dict):
        if limited.get("nominalConcurrencyShares") is None:
            limited["nominalConcurrencyShares"] = DEFAULT_SHARES
        limited.setdefault("lendablePercent", 0)
        response = limited.get("limitResponse")
        queuing = response.get("queuing") if isinstance(response, dict) else None
        if isinstance(queuing, dict):
            for field, value in (("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)):
                if not queuing.get(field):
                    queuing[field] = value
    exempt = spec.get("exempt")
    if isinstance(exempt, dict):
        exempt.setdefault("nominalConcurrencyShares", 0)
        exempt.setdefault("lendablePercent", 0)


# --- FlowSchema ------------------------------------------------------------------------------------


def validate_flow_schema(obj: Obj) -> list[FieldError]:
    name = (obj.get("metadata") or {}).get("name") or ""
    spec = obj.get("spec") or {}
    errs: list[FieldError] = []
    precedence = spec.get("matchingPrecedence", 0)
    if not isinstance(precedence, int) or precedence <= 0:
        errs.append(invalid("spec.matchingPrecedence", precedence, "must be a positive value"))
    elif precedence > MAX_PRECEDENCE:
        errs.append(
            invalid("spec.matchingPrecedence", precedence, f"must not be greater than {MAX_PRECEDENCE}")
        )
    elif precedence == 1 and name != EXEMPT:
        errs.append(
            invalid(
                "spec.matchingPrecedence",
                precedence,
                "only the schema named 'exempt' may have matchingPrecedence 1",
            )
        )
    method = spec.get("distinguisherMethod")
    if method is not None and (method or {}).get("type") not in DISTINGUISHERS:
        errs.append(
            not_supported("spec.distinguisherMethod.type", (method or {}).get("type"), DISTINGUISHERS)
        )
    level = (spec.get("priorityLevelConfiguration") or {}).get("name") or ""
    if not level:
        errs.append(required("spec.priorityLevelConfiguration.name", "must reference a priority level"))
    else:
        errs += dns_subdomain("spec.priorityLevelConfiguration.name", level)
    for i, rule in enumerate(spec.get("rules") or []):
        errs += _rule(f"spec.rules[{i}]", rule or {})
    return errs


def _rule(path: str, rule: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    subjects = rule.get("subjects") or []
    if not subjects:
        errs.append(required(f"{path}.subjects", "subjects must contain at least one value"))
    for i, subject in enumerate(subjects):
        errs += _subject(f"{path}.subjects[{i}]", subject or {})
    resources = rule.get("resourceRules") or []
    non_resources = rule.get("nonResourceRules") or []
    if not resources and not non_resources:
        errs.append(required(path, "at least one of resourceRules and nonResourceRules has to be non-empty"))
    for i, r in enumerate(resources):
        errs += _resource_rule(f"{path}.resourceRules[{i}]", r or {})
    for i, r in enumerate(non_resources):
        errs += _non_resource_rule(f"{path}.nonResourceRules[{i}]", r or {})
    return errs


def _subject(path: str, subject: Obj) -> list[FieldError]:
    kind = subject.get("kind")
    if kind == "User":
        user = subject.get("user")
        if user is None:
            return [required(f"{path}.user", "user is required when subject kind is 'User'")]
        return [] if user.get("name") else [required(f"{path}.user.name", "username is required")]
    if kind == "Group":
        group = subject.get("group")
        if group is None:
            return [required(f"{path}.group", "group is required when subject kind is 'Group'")]
        return [] if group.get("name") else [required(f"{path}.group.name", "name is required")]
    if kind == "ServiceAccount":
        sa = subject.get("serviceAccount")
        if sa is None:
            return [
                required(
                    f"{path}.serviceAccount",
                    "serviceAccount is required when subject kind is 'ServiceAccount'",
                )
            ]
        errs = [] if sa.get("name") else [required(f"{path}.serviceAccount.name", "name is required")]
        if not sa.get("namespace"):
            errs.append(
                required(f"{path}.serviceAccount.namespace", "must specify namespace for service account")
            )
        return errs
    return [not_supported(f"{path}.kind", kind, SUBJECT_KINDS)]


def _verbs(path: str, verbs: list[Any], supported: list[str] | None) -> list[FieldError]:
    if not verbs:
        return [required(path, "verbs must contain at least one value")]
    if "*" in verbs:
        return (
            []
            if len(verbs) == 1
            else [invalid(path, verbs, "if '*' is present, must not specify other verbs")]
        )
    if supported is None:
        return []
    return [not_supported(f"{path}[{i}]", v, supported) for i, v in enumerate(verbs) if v not in supported]


def _resource_rule(path: str, rule: Obj) -> list[FieldError]:
    errs = _verbs(f"{path}.verbs", rule.get("verbs") or [], RESOURCE_VERBS)
    groups = rule.get("apiGroups") or []
    if not groups:
        errs.append(required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
    elif "*" in groups and len(groups) > 1:
        errs.append(
            invalid(f"{path}.apiGroups", groups, "if '*' is present, must not specify other api groups")
        )
    resources = rule.get("resources") or []
    if not resources:
        errs.append(required(f"{path}.resources", "resource rules must supply at least one resource"))
    elif "*" in resources and len(resources) > 1:
        errs.append(
            invalid(f"{path}.resources", resources, "if '*' is present, must not specify other resources")
        )
    namespaces = rule.get("namespaces") or []
    if not namespaces and not rule.get("clusterScope"):
        errs.append(
            required(
                f"{path}.namespaces",
                "resource rules that are not cluster scoped must supply at least one namespace",
            )
        )
    elif "*" in namespaces and len(namespaces) > 1:
        errs.append(
            invalid(f"{path}.namespaces", namespaces, "if '*' is present, must not specify other namespaces")
        )
    return errs


def _non_resource_rule(path: str, rule: Obj) -> list[FieldError]:
    errs = _verbs(f"{path}.verbs", rule.get("verbs") or [], None)
    urls = rule.get("nonResourceURLs") or []
    if not urls:
        errs.append(
            required(f"{path}.nonResourceURLs", "nonResource rules must supply at least one non-resource URL")
        )
    elif "*" in urls and len(urls) > 1:
        errs.append(
            invalid(
                f"{path}.nonResourceURLs", urls, "if '*' is present, must not specify other non-resource URLs"
            )
        )
    for i, url in enumerate(urls):
        if url != "*" and not str(url).startswith("/"):
            errs.append(invalid(f"{path}.nonResourceURLs[{i}]", url, "must start with slash"))
    return errs


# --- PriorityLevelConfiguration --------------------------------------------------------------------


def validate_priority_level(obj: Obj) -> list[FieldError]:
    name = (obj.get("metadata") or {}).get("name") or ""
    spec = obj.get("spec") or {}
    kind = spec.get("type")
    errs: list[FieldError] = []
    if kind not in LEVEL_TYPES:
        return [not_supported("spec.type", kind, LEVEL_TYPES)]
    if (name == EXEMPT) != (kind == "Exempt"):
        errs.append(invalid("spec.type", kind, "type must be 'Exempt' if and only if name is 'exempt'"))
    if kind == "Exempt":
        if spec.get("limited") is not None:
            errs.append(forbidden("spec.limited", "must be nil if the type is not Limited"))
        exempt = spec.get("exempt") or {}
        errs += _shares("spec.exempt", exempt)
        return errs
    if spec.get("exempt") is not None:
        errs.append(forbidden("spec.exempt", "must be nil if the type is Limited"))
    limited = spec.get("limited")
    if limited is None:
        errs.append(required("spec.limited", "must not be empty when type is Limited"))
        return errs
    errs += _shares("spec.limited", limited)
    borrowing = limited.get("borrowingLimitPercent")
    if borrowing is not None and (not isinstance(borrowing, int) or borrowing < 0):
        errs.append(
            invalid(
                "spec.limited.borrowingLimitPercent",
                borrowing,
                "if specified, must be a non-negative integer",
            )
        )
    return errs + _limit_response("spec.limited.limitResponse", limited.get("limitResponse") or {})


def _shares(path: str, config: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    shares = config.get("nominalConcurrencyShares", 0)
    if not isinstance(shares, int) or shares < 0:
        errs.append(invalid(f"{path}.nominalConcurrencyShares", shares, "must be a non-negative integer"))
    lendable = config.get("lendablePercent", 0)
    if not isinstance(lendable, int) or not 0 <= lendable <= 100:
        errs.append(invalid(f"{path}.lendablePercent", lendable, "must be between 0 and 100, inclusive"))
    return errs


def _limit_response(path: str, response: Obj) -> list[FieldError]:
    kind = response.get("type")
    if kind not in RESPONSE_TYPES:
        return [not_supported(f"{path}.type", kind, RESPONSE_TYPES)]
    queuing = response.get("queuing")
    if kind == "Reject":
        if queuing is not None:
            return [forbidden(f"{path}.queuing", "must be nil if limited.limitResponse.type is not Limited")]
        return []
    if queuing is None:
        return [required(f"{path}.queuing", "must not be empty if limited.limitResponse.type is Limited")]
    errs: list[FieldError] = []
    for field in ("queueLengthLimit", "queues", "handSize"):
        value = queuing.get(field, 0)
        if not isinstance(value, int) or value <= 0:
            errs.append(invalid(f"{path}.queuing.{field}", value, "must be positive"))
    queues, hand = queuing.get("queues", 0), queuing.get("handSize", 0)
    if isinstance(queues, int) and isinstance(hand, int) and queues > 0 and hand > 0:
        if hand > queues:
            errs.append(
                invalid(f"{path}.queuing.handSize", hand, f"should not be greater than queues ({queues})")
            )
        elif hand * math.log2(queues) > MAX_HASH_BITS:
            errs.append(
                invalid(
                    f"{path}.queuing",
                    queuing,
                    f"shuffle sharding is not possible with deckSize {queues} and handSize {hand}: "
                    f"required entropy bits of deckSize {queues} and handSize {hand} should not be "
                    f"greater than {MAX_HASH_BITS}",
                )
            )
    return errs
