"""core/v1 ResourceQuota: upstream's validation (ValidateResourceQuota: standard or qualified resource
names, non-negative and, for counts, whole quantities, scopes valid for the resources they limit,
conflicting scope pairs, scope selectors), a status subresource the controller and the quota admission
write, the REQUEST / LIMIT columns of `kubectl get quota`, and the ResourceQuota admission plugin
(`controlplane/apiserver/quota/`)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from controlplane.apiserver.quota.admission import ResourceQuotaAdmission
from controlplane.apiserver.validation import NEGATIVE, quantity
from controlplane.quota import evaluators as ev
from kubeclient import names
from kubeclient.quantity import FORMAT_ERROR

Obj = dict[str, Any]

STANDARD = frozenset(
    {
        "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.ephemeral-storage",
        "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas", "services",
        "replicationcontrollers", "secrets", "configmaps", "persistentvolumeclaims", "storage",
        "requests.storage", "services.nodeports", "services.loadbalancers",
    }
)  # fmt: skip
STANDARD_QUOTA = STANDARD - {"storage"}
INTEGER = frozenset(
    {
        "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
        "persistentvolumeclaims", "services.nodeports", "services.loadbalancers",
    }
)  # fmt: skip
POD_COUNT = frozenset({"pods"})
POD_COMPUTE = frozenset({"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"})
CONFLICTING = ((ev.BEST_EFFORT, ev.NOT_BEST_EFFORT), (ev.TERMINATING, ev.NOT_TERMINATING))
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
EXIST_ONLY = (
    "must be 'Exist' only operator when scope is any of ResourceQuotaScopeTerminating, "
    "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort and ResourceQuotaScopeNotBestEffort"
)


def _hugepages(name: str) -> bool:
    return name.startswith(("hugepages-", "requests.hugepages-"))


def is_standard_quota_resource(name: str) -> bool:
    return name in STANDARD_QUOTA or _hugepages(name)


def is_extended(name: str) -> bool:
    if ev.is_native(name) or name.startswith(ev.REQUESTS_PREFIX):
        return False
    return not names.qualified_name(ev.REQUESTS_PREFIX + name)


def is_integer_resource(name: str) -> bool:
    return name in INTEGER or is_extended(name)


def validate_resource_name(path: str, name: str) -> list[FieldError]:
    """ValidateResourceQuotaResourceName (validateResourceName, then a standard quota name)."""
    problems = [invalid(path, name, m) for m in names.qualified_name(name)]
    if problems:
        return problems
    if "/" not in name:
        if not (name in STANDARD or _hugepages(name)):
            return [invalid(path, name, "must be a standard resource type or fully qualified")]
        if not is_standard_quota_resource(name):
            return [invalid(path, name, "must be a standard resource for quota")]
    return []


def validate_quantity_value(path: str, name: str, text: Any) -> list[FieldError]:
    """ValidateResourceQuantityValue: non-negative, whole for counted resources."""
    value = quantity(text) if isinstance(text, str) else None
    if value is None:
        return [invalid(path, text, FORMAT_ERROR)]
    problems = []
    if value.sign() < 0:
        problems.append(invalid(path, str(value), NEGATIVE))
    if is_integer_resource(name) and value.milli_value() % 1000:
        problems.append(invalid(path, str(value), "must be an integer"))
    return problems


def validate_resource_list(path: str, values: Any) -> list[FieldError]:
    problems: list[FieldError] = []
    for name, text in (values or {}).items():
        at = f"{path}[{name}]"
        problems += validate_resource_name(at, name) + validate_quantity_value(at, name, text)
    return problems


def scope_valid_for(scope: str, resource: str) -> bool:
    """IsResourceQuotaScopeValidForResource."""
    if scope in (ev.TERMINATING, ev.NOT_TERMINATING, ev.NOT_BEST_EFFORT, ev.PRIORITY_CLASS):
        return resource in POD_COUNT or resource in POD_COMPUTE
    if scope == ev.BEST_EFFORT:
        return resource in POD_COUNT
    return True


def _scopes_for_resources(scope: str, hard: list[str]) -> bool:
    return all(not is_standard_quota_resource(k) or scope_valid_for(scope, k) for k in hard)


def _conflicts(scopes: set[str]) -> int:
    return sum(1 for pair in CONFLICTING if set(pair) <= scopes)


def validate_scopes(spec: Obj) -> list[FieldError]:
    scopes = spec.get("scopes") or []
    if not scopes:
        return []
    hard = sorted(spec.get("hard") or {})
    problems: list[FieldError] = []
    for scope in scopes:
        if scope not in ev.SCOPES:
            problems.append(invalid("spec.scopes", scopes, "unsupported scope"))
        for k in hard:
            if is_standard_quota_resource(k) and not scope_valid_for(scope, k):
                problems.append(invalid("spec.scopes", scopes, "unsupported scope applied to resource"))
    problems += [invalid("spec.scopes", scopes, "conflicting scopes")] * _conflicts(set(scopes))
    return problems


def validate_scope_selector(spec: Obj) -> list[FieldError]:
    selector = spec.get("scopeSelector")
    if selector is None:
        return []
    path = "spec.scopeSelector.matchExpressions"
    hard = sorted(spec.get("hard") or {})
    problems: list[FieldError] = []
    seen: set[str] = set()
    for req in selector.get("matchExpressions") or []:
        scope, op, values = req.get("scopeName"), req.get("operator"), req.get("values") or []
        if scope not in ev.SCOPES:
            problems.append(invalid(f"{path}.scopeName", scope, "unsupported scope"))
        for k in hard:
            if is_standard_quota_resource(k) and not scope_valid_for(str(scope), k):
                problems.append(invalid(path, selector, "unsupported scope applied to resource"))
        if (
            scope in (ev.BEST_EFFORT, ev.NOT_BEST_EFFORT, ev.TERMINATING, ev.NOT_TERMINATING)
            and op != "Exists"
        ):
            problems.append(invalid(f"{path}.operator", op, EXIST_ONLY))
        if op in ("In", "NotIn"):
            if not values:
                problems.append(
                    required(
                        f"{path}.values",
                        "must be at least one value when `operator` is 'In' or 'NotIn' for scope selector",
                    )
                )
        elif op in ("Exists", "DoesNotExist"):
            if values:
                problems.append(
                    invalid(
                        f"{path}.values",
                        values,
                        "must be no value when `operator` is 'Exist' or 'DoesNotExist' for scope selector",
                    )
                )
        else:
            problems.append(invalid(f"{path}.operator", op, "not a valid selector operator"))
        seen.add(str(scope))
    problems += [invalid(path, spec.get("scopes"), "conflicting scopes")] * _conflicts(seen)
    return problems


def _cell(obj: Obj) -> tuple[str, str]:
    """printResourceQuota: `name: used/hard` for each hard name, limits.* in the LIMIT column."""
    status = obj.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    request, limit = [], []
    for name in sorted((obj.get("spec") or {}).get("hard") or {}):
        pieces = name.split(".")
        column = limit if len(pieces) > 1 and pieces[0] == "limits" else request
        column.append(f"{name}: {used.get(name, '0')}/{hard.get(name, '0')}")
    return ", ".join(request), ", ".join(limit)


class ResourceQuota(Kind):
    kind = "ResourceQuota"
    plural = "resourcequotas"
    short_names = ("quota",)
    schema = "V1ResourceQuota"
    subresources = (StatusSubresource(),)
    type_marks = {
        ("V1ResourceQuotaSpec", "hard"): "map[quantity]",
        ("V1ResourceQuotaStatus", "hard"): "map[quantity]",
        ("V1ResourceQuotaStatus", "used"): "map[quantity]",
    }
    columns = (
        tables.NAME,
        tables.AGE,
        tables.column(
            "Request", desc="Request represents a minimum amount of cpu/memory that a container may consume."
        ),
        tables.column(
            "Limit",
            desc="Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
        ),
    )

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return (
            validate_resource_list("spec.hard", spec.get("hard"))
            + validate_scopes(spec)
            + validate_scope_selector(spec)
            + validate_resource_list("status.hard", status.get("hard"))
            + validate_resource_list("status.used", status.get("used"))
        )

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        new_scopes = set((new.get("spec") or {}).get("scopes") or [])
        if new_scopes != set((old.get("spec") or {}).get("scopes") or []):
            return [invalid("spec.scopes", (new.get("spec") or {}).get("scopes"), "field is immutable")]
        return []

    def cells(self, obj: Obj) -> list[Any]:
        request, limit = _cell(obj)
        return [obj["metadata"].get("name"), age(obj), request, limit]


KIND = ResourceQuota()
# The plugin charges usage by writing this kind's status; it runs after every other validating plugin.
ResourceQuota.admission = (ResourceQuotaAdmission(KIND),)
