"""Which FlowSchema a request matches (upstream's apf_filter matching, rule_wildcard semantics): the
schemas in order of matchingPrecedence then name, the first whose rules match wins; a rule matches when
one of its subjects names the user (by name, group or service account) and, for a resource request,
one of its resource rules matches verb, API group, resource[/subresource] and namespace (or cluster
scope), for a non-resource request one of its non-resource rules matches verb and path. Pure: the
dispatcher builds a Classifier from the stored objects whenever they change."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.flowcontrol.requestinfo import RequestInfo

Obj = dict[str, Any]
SA_PREFIX = "system:serviceaccount:"
Matcher = Callable[[UserInfo, RequestInfo], bool]


def _in(value: str, allowed: list[str]) -> bool:
    return "*" in allowed or value in allowed


def _subject_matches(subject: Obj, user: UserInfo) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        name = (subject.get("user") or {}).get("name", "")
        return name == "*" or name == user.name
    if kind == "Group":
        name = (subject.get("group") or {}).get("name", "")
        return name == "*" or name in user.groups
    if kind == "ServiceAccount":
        sa = subject.get("serviceAccount") or {}
        if not user.name.startswith(SA_PREFIX):
            return False
        namespace, _, name = user.name[len(SA_PREFIX) :].partition(":")
        return namespace == sa.get("namespace") and (sa.get("name") == "*" or sa.get("name") == name)
    return False


def _resource_rule_matches(rule: Obj, info: RequestInfo) -> bool:
    if not _in(info.verb, rule.get("verbs") or []):
        return False
    resources = rule.get("resources") or []
    wanted = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
    if not _in(wanted, resources):
        return False
    if not _in(info.api_group, rule.get("apiGroups") or []):
        return False
    if not info.namespace:
        return bool(rule.get("clusterScope"))
    return _in(info.namespace, rule.get("namespaces") or [])


def _url_matches(patterns: list[str], path: str) -> bool:
    for pattern in patterns:
        if pattern == "*" or pattern == path:
            return True
        prefix = pattern[:-1] if pattern.endswith("*") else pattern + "/"
        if path.startswith(prefix):
            return True
    return False


def _non_resource_rule_matches(rule: Obj, info: RequestInfo) -> bool:
    return _in(info.verb, rule.get("verbs") or []) and _url_matches(rule.get("nonResourceURLs") or [], info.path)


def rule_matches(rule: Obj, user: UserInfo, info: RequestInfo) -> bool:
    if not any(_subject_matches(s, user) for s in rule.get("subjects") or []):
        return False
    if info.resource_request:
        return any(_resource_rule_matches(r, info) for r in rule.get("resourceRules") or [])
    return any(_non_resource_rule_matches(r, info) for r in rule.get("nonResourceRules") or [])


def schema_matches(schema: Obj, user: UserInfo, info: RequestInfo) -> bool:
    return any(rule_matches(r, user, info) for r in (schema.get("spec") or {}).get("rules") or [])


def distinguisher(schema: Obj, user: UserInfo, info: RequestInfo) -> str:
    """upstream's computeFlowDistinguisher: the user's name, the namespace, or nothing."""
    method = ((schema.get("spec") or {}).get("distinguisherMethod") or {}).get("type")
    if method == "ByUser":
        return user.name
    if method == "ByNamespace":
        return info.namespace
    return ""


def flow_hash(schema_name: str, flow: str) -> int:
    """A flow's 64-bit identity for shuffle sharding (upstream's hashFlowID: sha256 of the pair)."""
    digest = hashlib.sha256(f"{schema_name},{flow}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def ordered(schemas: list[Obj]) -> list[Obj]:
    """The order upstream tries schemas in: matchingPrecedence, then name."""
    return sorted(schemas, key=lambda s: ((s.get("spec") or {}).get("matchingPrecedence", 1000), s["metadata"]["name"]))


@dataclass(frozen=True, slots=True)
class Classified:
    schema: Obj
    level_name: str
    flow: str


class Classifier:
    """The schemas whose level exists, in matching order; `catch_all` when none matches."""

    def __init__(self, schemas: list[Obj], levels: set[str], catch_all: Obj) -> None:
        self.schemas = [
            s
            for s in ordered(schemas)
            if ((s.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name") in levels
        ]
        self.catch_all = catch_all

    def classify(self, user: UserInfo, info: RequestInfo) -> Classified:
        chosen = next((s for s in self.schemas if schema_matches(s, user, info)), self.catch_all)
        level = chosen["spec"]["priorityLevelConfiguration"]["name"]
        return Classified(chosen, level, distinguisher(chosen, user, info))
