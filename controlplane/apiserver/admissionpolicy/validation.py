"""Defaulting and validation of ValidatingAdmissionPolicy and its bindings, as upstream's
admissionregistration/v1 defaults and ValidateValidatingAdmissionPolicy(Binding): matchConstraints
with resourceRules, CEL that compiles (validations, messageExpression, matchConditions, variables),
known reasons and failure policies; a binding names its policy, at least one of Deny, Warn or Audit
(never Deny with Warn) and a paramRef with exactly one of name or selector."""

from __future__ import annotations

import re
from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, invalid, not_supported, required
from controlplane.apiserver.rbac.validation import label_selector
from controlplane.apiserver.validation import dns_subdomain, path_segment, qualified_name
from controlplane.apiserver.webhooks import validation as hooks

Obj = dict[str, Any]

REASONS = ["Forbidden", "Invalid", "RequestEntityTooLarge"]  # supportedValidationPolicyReason
ACTIONS = ["Audit", "Deny", "Warn"]
NOT_FOUND_ACTIONS = ["Deny", "Allow"]  # upstream lists them in this order
_CEL_IDENT = re.compile(r"^[_a-zA-Z][_a-zA-Z0-9]*$")
_CEL_RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace "
    "return var void while".split()
)


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


def _named_rule(path: str, rule: Any) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[str] = set()
    for j, name in enumerate((rule or {}).get("resourceNames") or [] if isinstance(rule, dict) else []):
        out += [invalid(f"{path}.resourceNames[{j}]", name, m) for m in path_segment(str(name))]
        if name in seen:
            out.append(duplicate(f"{path}.resourceNames[{j}]", name))
        seen.add(name)
    return out + hooks.rule(path, rule)


def match_resources(path: str, match: Any) -> list[FieldError]:
    """validateMatchResources (after defaulting, the policy and selectors are always there)."""
    if not isinstance(match, dict):
        return []
    out: list[FieldError] = []
    policy = match.get("matchPolicy")
    if policy is None:
        out.append(required(f"{path}.matchPolicy"))
    elif policy not in hooks.MATCH_POLICIES:
        out.append(not_supported(f"{path}.matchPolicy", policy, hooks.MATCH_POLICIES))
    for field in ("namespaceSelector", "objectSelector"):
        if match.get(field) is None:
            out.append(required(f"{path}.{field}"))
        else:
            out += label_selector(match[field], f"{path}.{field}")
    for field in ("resourceRules", "excludeResourceRules"):
        for i, rule in enumerate(match.get(field) or []):
            out += _named_rule(f"{path}.{field}[{i}]", rule)
    return out


def _expression(path: str, text: Any, what: str = "expression") -> list[FieldError]:
    if not isinstance(text, str) or not text.strip():
        return [required(path, f"{what} is not specified")]
    return hooks.expression(path, text)


def _validation(where: str, v: Obj) -> list[FieldError]:
    out = _expression(f"{where}.expression", v.get("expression"))
    message_expression = v.get("messageExpression") or ""
    if message_expression and not message_expression.strip():
        out.append(
            invalid(f"{where}.messageExpression", message_expression, "must be non-empty if specified")
        )
    elif message_expression:
        out += hooks.expression(f"{where}.messageExpression", message_expression)
    message = v.get("message") or ""
    if message and not message.strip():
        out.append(invalid(f"{where}.message", message, "message must be non-empty if specified"))
    elif "\n" in message.strip() or "\r" in message.strip():
        out.append(invalid(f"{where}.message", message, "message must not contain line breaks"))
    reason = v.get("reason")
    if reason is not None and reason not in REASONS:
        out.append(not_supported(f"{where}.reason", reason, REASONS))
    return out


def _variable(where: str, v: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    name = v.get("name") or ""
    if not name.strip():
        out.append(required(f"{where}.name", "name is not specified"))
    elif not _CEL_IDENT.match(name) or name in _CEL_RESERVED:
        out.append(invalid(f"{where}.name", name, "name is not a valid CEL identifier"))
    return out + _expression(f"{where}.expression", v.get("expression"))


def policy(obj: Obj) -> list[FieldError]:
    """validateValidatingAdmissionPolicySpec, in upstream's order."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    out: list[FieldError] = []
    failure = spec.get("failurePolicy")
    if failure is None:
        out.append(required("spec.failurePolicy"))
    elif failure not in hooks.FAILURE_POLICIES:
        out.append(not_supported("spec.failurePolicy", failure, hooks.FAILURE_POLICIES))
    kind = spec.get("paramKind")
    if isinstance(kind, dict):
        if not kind.get("apiVersion"):
            out.append(required("spec.paramKind.apiVersion"))
        if not kind.get("kind"):
            out.append(required("spec.paramKind.kind"))
    match = spec.get("matchConstraints")
    if not isinstance(match, dict):
        out.append(required("spec.matchConstraints"))
    else:
        out += match_resources("spec.matchConstraints", match)
        if not match.get("resourceRules"):
            out.append(required("spec.matchConstraints.resourceRules"))
    out += hooks.match_conditions("spec.matchConditions", spec.get("matchConditions"))
    for i, v in enumerate(spec.get("variables") or []):
        out += _variable(f"spec.variables[{i}]", v if isinstance(v, dict) else {})
    validations, annotations = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not annotations:
        text = "validations or auditAnnotations must contain at least one item"
        return [*out, required("spec.validations", text), required("spec.auditAnnotations", text)]
    for i, v in enumerate(validations):
        out += _validation(f"spec.validations[{i}]", v if isinstance(v, dict) else {})
    keys: set[str] = set()
    name = (obj.get("metadata") or {}).get("name") or ""
    for i, a in enumerate(annotations):
        a = a if isinstance(a, dict) else {}
        where, key = f"spec.auditAnnotations[{i}]", a.get("key") or ""
        out += qualified_name(f"{where}.key", f"{name}/{key}")
        out += _expression(f"{where}.valueExpression", a.get("valueExpression"), "valueExpression")
        if key in keys:
            out.append(duplicate(f"{where}.key", key))
        keys.add(key)
    return out


def _param_ref(ref: Any) -> list[FieldError]:
    if not isinstance(ref, dict):
        return []
    out: list[FieldError] = []
    name, selector = ref.get("name") or "", ref.get("selector")
    exclusive = "Forbidden: name and selector are mutually exclusive"
    if name:
        out += [invalid("spec.paramRef.name", name, m) for m in path_segment(name)]
        if selector is not None:
            out.append(FieldError("FieldValueForbidden", "spec.paramRef.name", exclusive))
    if selector is not None:
        out += label_selector(selector, "spec.paramRef.selector")
        if name:
            out.append(FieldError("FieldValueForbidden", "spec.paramRef.selector", exclusive))
    if not name and selector is None:
        out.append(required("spec.paramRef", "one of name or selector must be specified"))
    action = ref.get("parameterNotFoundAction")
    if not action:
        out.append(required("spec.paramRef.parameterNotFoundAction"))
    elif action not in NOT_FOUND_ACTIONS:
        out.append(not_supported("spec.paramRef.parameterNotFoundAction", action, NOT_FOUND_ACTIONS))
    return out


def binding(obj: Obj) -> list[FieldError]:
    """validateValidatingAdmissionPolicyBindingSpec, in upstream's order (and with its field path
    `spec.matchResouces`, misspelt upstream)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    out: list[FieldError] = []
    name = spec.get("policyName") or ""
    if not name:
        out.append(required("spec.policyName"))
    else:
        out += dns_subdomain("spec.policyName", name)
    out += _param_ref(spec.get("paramRef"))
    out += match_resources("spec.matchResouces", spec.get("matchResources"))
    actions = spec.get("validationActions") or []
    seen: set[str] = set()
    for i, action in enumerate(actions):
        if action not in ACTIONS:
            out.append(not_supported(f"spec.validationActions[{i}]", action, ACTIONS))
        if action in seen:
            out.append(duplicate(f"spec.validationActions[{i}]", action))
        seen.add(action)
    if {"Deny", "Warn"} <= seen:
        out.append(
            invalid(
                "spec.validationActions",
                actions,
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            )
        )
    if not seen:
        out.append(required("spec.validationActions", "at least one validation action is required"))
    return out
