"""The audit policy (audit.k8s.io/v1 Policy): loaded and checked once at start, then asked per request.

Upstream's pkg/audit/policy: a file is read, decoded, validated (ValidatePolicy's field errors as one
aggregate), refused with no rules; each rule's omitStages becomes the union with the policy's; the
first rule matching a request decides its level (none matching: None)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controlplane.apiserver.audit.requestinfo import Attributes

log = logging.getLogger("controlplane.apiserver.audit")

NONE, METADATA, REQUEST, REQUEST_RESPONSE = "None", "Metadata", "Request", "RequestResponse"
LEVELS = (NONE, METADATA, REQUEST, REQUEST_RESPONSE)
_ORDER = {level: i for i, level in enumerate(LEVELS)}
REQUEST_RECEIVED, RESPONSE_STARTED, RESPONSE_COMPLETE, PANIC = (
    "RequestReceived",
    "ResponseStarted",
    "ResponseComplete",
    "Panic",
)
STAGES = (REQUEST_RECEIVED, RESPONSE_STARTED, RESPONSE_COMPLETE, PANIC)
API_VERSION = "audit.k8s.io/v1"
_RULE_FIELDS = {
    "level", "users", "userGroups", "verbs", "resources", "namespaces", "nonResourceURLs", "omitStages",
    "omitManagedFields",
}  # fmt: skip
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class PolicyError(Exception):
    """A policy file that cannot be used, with upstream's text."""


def at_least(level: str, floor: str) -> bool:
    return _ORDER[level] >= _ORDER[floor]


@dataclass(frozen=True)
class GroupResources:
    group: str = ""
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    level: str
    users: tuple[str, ...] = ()
    user_groups: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resources: tuple[GroupResources, ...] = ()
    namespaces: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool | None = None

    def matches(self, attrs: Attributes) -> bool:
        """upstream's ruleMatches."""
        user = attrs.user
        if self.users and (user is None or user.name not in self.users):
            return False
        if self.user_groups and (user is None or not any(g in self.user_groups for g in user.groups)):
            return False
        if self.verbs and attrs.verb not in self.verbs:
            return False
        if self.namespaces or self.resources:
            return self._matches_resource(attrs)
        if self.non_resource_urls:
            return not attrs.resource_request and any(
                _path_matches(attrs.path, spec) for spec in self.non_resource_urls
            )
        return True

    def _matches_resource(self, attrs: Attributes) -> bool:
        if not attrs.resource_request:
            return False
        if self.namespaces and attrs.namespace not in self.namespaces:  # cluster-scoped: ""
            return False
        if not self.resources:
            return True
        resource, sub = attrs.resource, attrs.subresource
        combined = f"{resource}/{sub}" if sub else resource
        for gr in self.resources:
            if gr.group != attrs.api_group:
                continue
            if not gr.resources:
                return True
            if gr.resource_names and attrs.name not in gr.resource_names:
                continue
            for res in gr.resources:
                if res in (combined, "*"):
                    return True
                if sub and res.startswith("*/") and res[2:] == sub:
                    return True
                if res.endswith("/*") and res[:-2] == resource:
                    return True
        return False


def _path_matches(path: str, spec: str) -> bool:
    if spec in ("*", path):
        return True
    return spec.endswith("*") and path.startswith(spec.rstrip("*"))


@dataclass(frozen=True)
class RequestAuditConfig:
    """What a request is audited with: its level, the stages left out, whether managedFields are."""

    level: str = NONE
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()
    omit_stages: frozenset[str] = frozenset()
    omit_managed_fields: bool = False

    def evaluate(self, attrs: Attributes) -> RequestAuditConfig:
        """upstream's EvaluatePolicyRule: the first rule that matches, else None."""
        for rule in self.rules:
            if rule.matches(attrs):
                omit = (
                    self.omit_managed_fields if rule.omit_managed_fields is None else rule.omit_managed_fields
                )
                return RequestAuditConfig(rule.level, rule.omit_stages, omit)
        return RequestAuditConfig(NONE, self.omit_stages, self.omit_managed_fields)


def load_policy_file(path: Path) -> Policy:
    """upstream's LoadPolicyFromFile; errors read as theirs (`...: from file PATH`)."""
    try:
        text = path.read_bytes()
    except OSError as err:
        raise PolicyError(f'failed to read file path "{path}": {err.strerror or err}') from None
    try:
        return parse_policy(text)
    except PolicyError as err:
        raise PolicyError(f"{err}: from file {path}") from None


def parse_policy(text: bytes | str) -> Policy:
    """upstream's LoadPolicyFromBytes: decode, check apiVersion/kind, ValidatePolicy, at least one rule."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PolicyError(f"failed decoding: {err}") from None
    if not isinstance(doc, dict) or not doc.get("kind"):
        shown = (
            json.dumps(doc)
            if isinstance(doc, dict)
            else str(text if isinstance(text, str) else text.decode(errors="replace"))
        )
        raise PolicyError(f"failed decoding: Object 'Kind' is missing in '{shown.strip()}'")
    api_version = str(doc.get("apiVersion") or "")
    if api_version != API_VERSION or doc["kind"] != "Policy":
        group, _, version = api_version.rpartition("/")
        raise PolicyError(f"unknown group version field {group}/{version}, Kind={doc['kind']} in policy")
    unknown = set(doc) - {"apiVersion", "kind", "metadata", "rules", "omitStages", "omitManagedFields"}
    raw_rules = doc.get("rules") or []
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        raise PolicyError("failed decoding: rules: expected a list of objects")
    problems: list[str] = []
    omit = _stages(doc.get("omitStages"), "omitStages", problems)
    rules: list[Rule] = []
    for i, raw in enumerate(raw_rules):
        unknown |= {f"rules[{i}].{k}" for k in set(raw) - _RULE_FIELDS}
        rules.append(_rule(raw, f"rules[{i}]", omit, problems))
    if unknown:
        # upstream's strict decoding fails, and it falls back to lenient decoding with a warning.
        log.warning("event=audit-policy-lenient unknown_fields=%s", ",".join(sorted(unknown)))
    if problems:
        raise PolicyError(problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
    if not rules:
        raise PolicyError("loaded illegal policy with 0 rules")
    return Policy(tuple(rules), omit, bool(doc.get("omitManagedFields")))


def _strings(value: Any, path: str, problems: list[str]) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{path}: Invalid value: {json.dumps(value)}: must be a list of strings")
        return ()
    return tuple(value)


def _stages(value: Any, path: str, problems: list[str]) -> frozenset[str]:
    stages = _strings(value, path, problems)
    allowed = ",".join(sorted(STAGES))
    for i, stage in enumerate(stages):
        if stage not in STAGES:
            problems.append(f'{path}[{i}]: Invalid value: "{stage}": allowed stages are {allowed}')
    return frozenset(s for s in stages if s in STAGES)


def _rule(raw: dict[str, Any], path: str, policy_omit: frozenset[str], problems: list[str]) -> Rule:
    level = raw.get("level")
    if level in (None, ""):
        problems.append(f"{path}.level: Required value")
    elif level not in LEVELS:
        supported = ", ".join(f'"{lv}"' for lv in LEVELS)
        problems.append(f'{path}.level: Unsupported value: "{level}": supported values: {supported}')
    urls = _strings(raw.get("nonResourceURLs"), f"{path}.nonResourceURLs", problems)
    for i, url in enumerate(urls):
        if url == "*":
            continue
        if not url.startswith("/"):
            problems.append(
                f'{path}.nonResourceURLs[{i}]: Invalid value: "{url}": '
                "non-resource URL rules must begin with a '/' character"
            )
        if url and "*" in url[:-1]:
            problems.append(
                f'{path}.nonResourceURLs[{i}]: Invalid value: "{url}": '
                "non-resource URL wildcards '*' must be the final character of the rule"
            )
    resources = _group_resources(raw.get("resources"), f"{path}.resources", problems)
    namespaces = _strings(raw.get("namespaces"), f"{path}.namespaces", problems)
    if urls and (resources or namespaces):
        problems.append(
            f"{path}.nonResourceURLs: Invalid value: {json.dumps(list(urls))}: "
            "rules cannot apply to both regular resources and non-resource URLs"
        )
    omit_managed = raw.get("omitManagedFields")
    return Rule(
        level=level if level in LEVELS else NONE,
        users=_strings(raw.get("users"), f"{path}.users", problems),
        user_groups=_strings(raw.get("userGroups"), f"{path}.userGroups", problems),
        verbs=_strings(raw.get("verbs"), f"{path}.verbs", problems),
        resources=resources,
        namespaces=namespaces,
        non_resource_urls=urls,
        omit_stages=policy_omit | _stages(raw.get("omitStages"), f"{path}.omitStages", problems),
        omit_managed_fields=None if omit_managed is None else bool(omit_managed),
    )


def _group_resources(value: Any, path: str, problems: list[str]) -> tuple[GroupResources, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        problems.append(f"{path}: Invalid value: {json.dumps(value)}: must be a list of objects")
        return ()
    out = []
    for i, gr in enumerate(value):
        group = gr.get("group") or ""
        if group and (len(group) > 253 or not _DNS1123_SUBDOMAIN.match(group)):
            problems.append(
                f'{path}.group: Invalid value: "{group}": a lowercase RFC 1123 subdomain must consist of lower '
                "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                "character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            )
        out.append(
            GroupResources(
                group,
                _strings(gr.get("resources"), f"{path}[{i}].resources", problems),
                _strings(gr.get("resourceNames"), f"{path}[{i}].resourceNames", problems),
            )
        )
    return tuple(out)
