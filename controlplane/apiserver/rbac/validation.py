"""Validation of the RBAC kinds (upstream's pkg/apis/rbac/validation): rules, role references,
subjects and aggregation rules, with upstream's field paths and texts (a rule without verbs is
`rules[0].verbs: Required value: verbs must contain at least one value`), and the defaults upstream
applies when decoding (a User or Group subject and a roleRef without apiGroup get
rbac.authorization.k8s.io).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, not_supported, required
from controlplane.apiserver.validation import dns_subdomain, labels, path_segment, qualified_name

GROUP = "rbac.authorization.k8s.io"
Obj = dict[str, Any]


def go_value(value: Any) -> str:
    """Go's %#v of the few value shapes these messages print."""
    if isinstance(value, list):
        return "[]string{" + ", ".join(_go_string(v) for v in value) + "}"
    if isinstance(value, str):
        return _go_string(value)
    return str(value)


def _go_string(value: Any) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def invalid_go(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {value}: {detail}")


def role_name(path: str, name: str) -> list[FieldError]:
    """minimalNameRequirements: names need only be URL path segments (`system:controller:x` is fine)."""
    return [
        FieldError("FieldValueInvalid", path, f'Invalid value: "{name}": {m}') for m in path_segment(name)
    ]


def policy_rule(rule: Any, namespaced: bool, path: str) -> list[FieldError]:
    """validatePolicyRule."""
    rule = rule if isinstance(rule, dict) else {}
    out: list[FieldError] = []
    if not rule.get("verbs"):
        out.append(required(f"{path}.verbs", "verbs must contain at least one value"))
    urls = rule.get("nonResourceURLs") or []
    if urls:
        if namespaced:
            out.append(
                invalid_go(
                    f"{path}.nonResourceURLs",
                    go_value(urls),
                    "namespaced rules cannot apply to non-resource URLs",
                )
            )
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            out.append(
                invalid_go(
                    f"{path}.nonResourceURLs",
                    go_value(urls),
                    "rules cannot apply to both regular resources and non-resource URLs",
                )
            )
        return out
    if not rule.get("apiGroups"):
        out.append(required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
    if not rule.get("resources"):
        out.append(required(f"{path}.resources", "resource rules must supply at least one resource"))
    if rule.get("resourceNames") and len(rule.get("resources") or []) > 1:
        out.append(required(f"{path}.resourceNames", "resource names cannot apply to multiple resources"))
    return out


def rules(obj: Obj, namespaced: bool) -> list[FieldError]:
    return [
        e for i, r in enumerate(obj.get("rules") or []) for e in policy_rule(r, namespaced, f"rules[{i}]")
    ]


def role_ref(ref: Any, kinds: list[str]) -> list[FieldError]:
    ref = ref if isinstance(ref, dict) else {}
    out: list[FieldError] = []
    if ref.get("apiGroup", "") != GROUP:
        out.append(not_supported("roleRef.apiGroup", ref.get("apiGroup", ""), [GROUP]))
    if ref.get("kind", "") not in kinds:
        out.append(not_supported("roleRef.kind", ref.get("kind", ""), kinds))
    name = ref.get("name") or ""
    if not name:
        out.append(required("roleRef.name"))
    else:
        out += role_name("roleRef.name", name)
    return out


def go_role_ref(ref: Any) -> str:
    ref = ref if isinstance(ref, dict) else {}
    return (
        f"rbac.RoleRef{{APIGroup:{_go_string(ref.get('apiGroup', ''))}, Kind:{_go_string(ref.get('kind', ''))}, "
        f"Name:{_go_string(ref.get('name', ''))}}}"
    )


def role_ref_unchanged(new: Obj, old: Obj) -> list[FieldError]:
    """roleRef is immutable: `roleRef: Invalid value: rbac.RoleRef{...}: cannot change roleRef`."""
    if (new.get("roleRef") or {}) != (old.get("roleRef") or {}):
        return [invalid_go("roleRef", go_role_ref(new.get("roleRef")), "cannot change roleRef")]
    return []


def subject(value: Any, namespaced: bool, path: str) -> list[FieldError]:
    """validateRoleBindingSubject."""
    value = value if isinstance(value, dict) else {}
    out: list[FieldError] = []
    name, kind, group = value.get("name") or "", value.get("kind") or "", value.get("apiGroup") or ""
    if not name:
        out.append(required(f"{path}.name"))
    if kind == "ServiceAccount":
        if name:
            out += dns_subdomain(f"{path}.name", name)
        if group:
            out.append(not_supported(f"{path}.apiGroup", group, [""]))
        if not namespaced and not value.get("namespace"):
            out.append(required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if not name:
            out.append(
                FieldError(
                    "FieldValueInvalid",
                    f"{path}.name",
                    f'Invalid value: "": {kind.lower()} name cannot be empty',
                )
            )
        if group != GROUP:
            out.append(not_supported(f"{path}.apiGroup", group, [GROUP]))
    else:
        out.append(not_supported(f"{path}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return out


def subjects(obj: Obj, namespaced: bool) -> list[FieldError]:
    return [
        e for i, s in enumerate(obj.get("subjects") or []) for e in subject(s, namespaced, f"subjects[{i}]")
    ]


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def label_selector(selector: Any, path: str) -> list[FieldError]:
    """ValidateLabelSelector: label keys and values, known operators, values only with In/NotIn."""
    selector = selector if isinstance(selector, dict) else {}
    out = labels(f"{path}.matchLabels", selector.get("matchLabels"))
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        expr = expr if isinstance(expr, dict) else {}
        operator, values = expr.get("operator", ""), expr.get("values") or []
        if operator in ("In", "NotIn") and not values:
            out.append(required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist") and values:
            out.append(
                FieldError(
                    "FieldValueForbidden",
                    f"{where}.values",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
        elif operator not in _OPERATORS:
            out.append(not_supported(f"{where}.operator", operator, list(_OPERATORS)))
        out += qualified_name(f"{where}.key", expr.get("key") or "")
    return out


def aggregation_rule(obj: Obj) -> list[FieldError]:
    rule = obj.get("aggregationRule")
    if rule is None:
        return []
    selectors = (rule or {}).get("clusterRoleSelectors") or []
    if not selectors:
        return [
            required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            )
        ]
    return [
        e
        for i, s in enumerate(selectors)
        for e in label_selector(s, f"aggregationRule.clusterRoleSelectors[{i}]")
    ]


def default_binding(obj: Obj) -> None:
    """SetDefaults_RoleBinding / _ClusterRoleBinding / _Subject."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for s in obj.get("subjects") or []:
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = GROUP


__all__ = [
    "aggregation_rule",
    "default_binding",
    "go_value",
    "label_selector",
    "policy_rule",
    "role_name",
    "role_ref",
    "role_ref_unchanged",
    "rules",
    "subject",
    "subjects",
]
