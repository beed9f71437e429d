"""Defaulting and validation of ValidatingAdmissionPolicy and its bindings, as upstream's
admissionregistration/v1 defaults and ValidateValidatingAdmissionPolicy(Binding): matchConstraints
with resourceRules, CEL that compiles (validations, messageExpression, matchConditions, variables),
known reasons and failure policies; a binding names its policy, at least one of Deny, Warn or Audit
(never Deny with Warn) and a paramRef with exactly one of name or selector."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required
from controlplane.apiserver.rbac.validation import label_selector
from controlplane.apiserver.validation import dns_subdomain, qualified_name
from controlplane.apiserver.webhooks import validation as hooks

Obj = dict[str, Any]

REASONS = ["Forbidden", "Invalid", "RequestEntityTooLarge"]  # supportedValidationPolicyReason
ACTIONS = ["Audit", "Deny", "Warn"]
NOT_FOUND_ACTIONS = ["Allow", "Deny"]


def default_match_resources(match: Any) -> None:
    if not isinstance(match, dict):
        return
    match.setdefault("namespaceSelector", {})
    match.setdefault("objectSelector", {})
    match.setdefault("matchPolicy", "Equivalent")
    for field in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(field) or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def default_policy(obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("failurePolicy", "Fail")
    default_match_resources(spec.get("matchConstraints"))


def default_binding(obj: Obj) -> None:
    default_match_resources(obj.setdefault("spec", {}).get("matchResources"))


def match_resources(path: str, match: Any, rules_required: bool) -> list[FieldError]:
    if not isinstance(match, dict):
        return [required(path)] if rules_required else []
    out: list[FieldError] = []
    rules = match.get("resourceRules") or []
    if rules_required and not rules:
        out.append(required(f"{path}.resourceRules"))
    for field in ("resourceRules", "excludeResourceRules"):
        for i, rule in enumerate(match.get(field) or []):
            out += hooks.rule(f"{path}.{field}[{i}]", rule)
            for j, name in enumerate((rule or {}).get("resourceNames") or []):
                out += dns_subdomain(f"{path}.{field}[{i}].resourceNames[{j}]", name)
    for field in ("namespaceSelector", "objectSelector"):
        if match.get(field) is not None:
            out += label_selector(match[field], f"{path}.{field}")
    policy = match.get("matchPolicy")
    if policy is not None and policy not in hooks.MATCH_POLICIES:
        out.append(not_supported(f"{path}.matchPolicy", policy, hooks.MATCH_POLICIES))
    return out


def _validations(path: str, items: Any) -> list[FieldError]:
    out: list[FieldError] = []
    for i, v in enumerate(items or []):
        v = v if isinstance(v, dict) else {}
        where = f"{path}[{i}]"
        out += hooks.expression(f"{where}.expression", v.get("expression"))
        if v.get("messageExpression"):
            out += hooks.expression(f"{where}.messageExpression", v["messageExpression"])
        message = v.get("message") or ""
        if "\n" in message:
            out.append(invalid(f"{where}.message", message, "message must not contain line breaks"))
        elif message and not message.strip():
            out.append(invalid(f"{where}.message", message, "message must be non-empty if specified"))
        reason = v.get("reason")
        if reason is not None and reason not in REASONS:
            out.append(not_supported(f"{where}.reason", reason, REASONS))
    return out


def _variables(path: str, items: Any) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for i, v in enumerate(items or []):
        v = v if isinstance(v, dict) else {}
        name = v.get("name") or ""
        if not name:
            out.append(required(f"{path}[{i}].name"))
        elif name in seen:
            out.append(duplicate(f"{path}[{i}].name", name))
        seen.add(name)
        out += hooks.expression(f"{path}[{i}].expression", v.get("expression"))
    return out


def policy(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    out: list[FieldError] = []
    kind = spec.get("paramKind")
    if isinstance(kind, dict):
        if not kind.get("apiVersion"):
            out.append(required("spec.paramKind.apiVersion"))
        if not kind.get("kind"):
            out.append(required("spec.paramKind.kind"))
    out += match_resources("spec.matchConstraints", spec.get("matchConstraints"), True)
    if not spec.get("validations") and not spec.get("auditAnnotations"):
        out.append(required("spec.validations", "validations or auditAnnotations must contain at least one item"))
    out += _validations("spec.validations", spec.get("validations"))
    failure = spec.get("failurePolicy")
    if failure is not None and failure not in hooks.FAILURE_POLICIES:
        out.append(not_supported("spec.failurePolicy", failure, hooks.FAILURE_POLICIES))
    out += hooks.match_conditions("spec.matchConditions", spec.get("matchConditions"))
    out += _variables("spec.variables", spec.get("variables"))
    for i, a in enumerate(spec.get("auditAnnotations") or []):
        a = a if isinstance(a, dict) else {}
        out += qualified_name(f"spec.auditAnnotations[{i}].key", a.get("key") or "")
        out += hooks.expression(f"spec.auditAnnotations[{i}].valueExpression", a.get("valueExpression"))
    return out


def binding(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    out: list[FieldError] = []
    if not spec.get("policyName"):
        out.append(required("spec.policyName"))
    actions = spec.get("validationActions") or []
    if not actions:
        out.append(required("spec.validationActions", "at least one validation action is required"))
    seen: set[str] = set()
    for i, action in enumerate(actions):
        if action in seen:
            out.append(duplicate(f"spec.validationActions[{i}]", action))
        elif action not in ACTIONS:
            out.append(not_supported(f"spec.validationActions[{i}]", action, ACTIONS))
        seen.add(action)
    if {"Deny", "Warn"} <= seen:
        out.append(
            invalid(
                "spec.validationActions",
                actions,
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            )
        )
    ref = spec.get("paramRef")
    if isinstance(ref, dict):
        has_name, has_selector = bool(ref.get("name")), ref.get("selector") is not None
        if has_name and has_selector:
            out.append(FieldError("FieldValueForbidden", "spec.paramRef.name", "Forbidden: name and selector are mutually exclusive"))
        elif not has_name and not has_selector:
            out.append(required("spec.paramRef", "one of name or selector must be specified"))
        if has_selector:
            out += label_selector(ref["selector"], "spec.paramRef.selector")
        action = ref.get("parameterNotFoundAction")
        if not action:
            out.append(required("spec.paramRef.parameterNotFoundAction"))
        elif action not in NOT_FOUND_ACTIONS:
            out.append(not_supported("spec.paramRef.parameterNotFoundAction", action, NOT_FOUND_ACTIONS))
    out += match_resources("spec.matchResources", spec.get("matchResources"), False)
    return out
