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
    return _in(info.verb, rule.get("verbs") or []) and _url_matches(
        rule.get("nonResourceURLs") or [], info.path
    )


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
    return sorted(
        schemas, key=lambda s: ((s.get("spec") or {}).get("matchingPrecedence", 1000), s["metadata"]["name"])
    )


@dataclass(frozen=True, slots=True)
class Classified:
    schema: Obj
    level_name: str
    flow: str


class _Names:
    """A list of names where "*" matches everything, as a set lookup."""

    __slots__ = ("any", "names")

    def __init__(self, names: list[str] | None) -> None:
        self.any = "*" in (names or [])
        self.names = frozenset(names or [])

    def __contains__(self, value: str) -> bool:
        return self.any or value in self.names


@dataclass(frozen=True, slots=True)
class _Compiled:
    """One schema's rules in the shape a request is matched against (sets, not lists of dicts)."""

    schema: Obj
    level: str
    method: str
    rules: tuple[
        tuple[
            tuple[Obj, ...],
            tuple[tuple[_Names, _Names, _Names, _Names, bool], ...],
            tuple[tuple[_Names, list[str]], ...],
        ],
        ...,
    ]

    @classmethod
    def of(cls, schema: Obj) -> _Compiled:
        spec = schema.get("spec") or {}
        rules = []
        for rule in spec.get("rules") or []:
            resources = tuple(
                (
                    _Names(r.get("verbs")),
                    _Names(r.get("apiGroups")),
                    _Names(r.get("resources")),
                    _Names(r.get("namespaces")),
                    bool(r.get("clusterScope")),
                )
                for r in rule.get("resourceRules") or []
            )
            non_resources = tuple(
                (_Names(r.get("verbs")), list(r.get("nonResourceURLs") or []))
                for r in rule.get("nonResourceRules") or []
            )
            rules.append((tuple(rule.get("subjects") or []), resources, non_resources))
        method = (spec.get("distinguisherMethod") or {}).get("type") or ""
        return cls(schema, spec["priorityLevelConfiguration"]["name"], method, tuple(rules))

    def matches(self, user: UserInfo, info: RequestInfo) -> bool:
        for subjects, resources, non_resources in self.rules:
            if not any(_subject_matches(s, user) for s in subjects):
                continue
            if info.resource_request:
                wanted = f"{info.resource}/{info.subresource}" if info.subresource else info.resource
                for verbs, groups, names, namespaces, cluster in resources:
                    if info.verb in verbs and wanted in names and info.api_group in groups:
                        if (info.namespace in namespaces) if info.namespace else cluster:
                            return True
            else:
                for verbs, urls in non_resources:
                    if info.verb in verbs and _url_matches(urls, info.path):
                        return True
        return False


class Classifier:
    """The schemas whose level exists, in matching order; `catch_all` when none matches. Results are
    remembered per (user, request shape) until the configuration changes, so a request usually costs a
    dictionary lookup."""

    MEMORY = 4096

    def __init__(self, schemas: list[Obj], levels: set[str], catch_all: Obj) -> None:
        self.schemas = [
            _Compiled.of(s)
            for s in ordered(schemas)
            if ((s.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name") in levels
        ]
        self.catch_all = _Compiled.of(catch_all)
        self._memory: dict[tuple[Any, ...], tuple[_Compiled, str]] = {}

    def classify(self, user: UserInfo, info: RequestInfo) -> Classified:
        key = (
            user.name,
            user.groups,
            info.resource_request,
            info.verb,
            info.api_group,
            info.resource,
            info.subresource,
            info.namespace,
            "" if info.resource_request else info.path,
        )
        found = self._memory.get(key)
        if found is None:
            chosen = next((s for s in self.schemas if s.matches(user, info)), self.catch_all)
            if len(self._memory) >= self.MEMORY:
                self._memory.clear()
            found = self._memory[key] = (chosen, _flow(chosen.method, user, info))
        chosen, flow = found
        return Classified(chosen.schema, chosen.level, flow)


def _flow(method: str, user: UserInfo, info: RequestInfo) -> str:
    if method == "ByUser":
        return user.name
    if method == "ByNamespace":
        return info.namespace
    return ""
