"""policy/v1 PodDisruptionBudget (upstream's pkg/registry/policy/poddisruptionbudget/strategy.go and
pkg/apis/policy/validation): how many of a set of pods voluntary disruptions (evictions, `kubectl drain`)
must leave running. The spec is mutable and counts in metadata.generation, so the eviction subresource
can tell a status the disruption controller has not yet recomputed (observedGeneration behind); the
status belongs to pods/status-style writes only (the controller and the eviction handler).

Validation is upstream's ValidatePodDisruptionBudget: minAvailable and maxUnavailable not both set, each
a non-negative count or a percentage of at most 100%, a valid label selector, the two
unhealthyPodEvictionPolicy values; the status counts non-negative (ValidatePodDisruptionBudgetStatusUpdate).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.deployment import _int_or_percent
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import nonnegative
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

IF_HEALTHY_BUDGET = "IfHealthyBudget"
ALWAYS_ALLOW = "AlwaysAllow"
EVICTION_POLICIES = [ALWAYS_ALLOW, IF_HEALTHY_BUDGET]
TYPE_MARKS = {
    ("V1PodDisruptionBudgetSpec", "minAvailable"): "int-or-string",
    ("V1PodDisruptionBudgetSpec", "maxUnavailable"): "int-or-string",
}
_CONDITION_STATUSES = ["False", "True", "Unknown"]


def _count_or_percent(path: str, value: Any) -> list[FieldError]:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    errors, number = _int_or_percent(path, value)
    if not errors and isinstance(value, str) and number > 100:
        errors.append(invalid(path, value, "must not be greater than 100%"))
    return errors


def validate_pdb_spec(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return []
    errors: list[FieldError] = []
    min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
    if min_available is not None and max_unavailable is not None:
        errors.append(invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
    if min_available is not None:
        errors += _count_or_percent("spec.minAvailable", min_available)
    if max_unavailable is not None:
        errors += _count_or_percent("spec.maxUnavailable", max_unavailable)
    selector = spec.get("selector")
    if selector is not None:
        try:
            from_label_selector(selector)
        except SelectorError as err:
            errors.append(invalid("spec.selector", selector, str(err)))
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        errors.append(not_supported("spec.unhealthyPodEvictionPolicy", policy, EVICTION_POLICIES))
    return errors


def validate_pdb_status(status: Any) -> list[FieldError]:
    if not isinstance(status, dict):
        return []
    errors: list[FieldError] = []
    for field in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        errors += nonnegative(f"status.{field}", status.get(field))
    for i, cond in enumerate(status.get("conditions") or []):
        at = f"status.conditions[{i}]"
        if not isinstance(cond, dict):
            continue
        if not cond.get("type"):
            errors.append(required(f"{at}.type"))
        if cond.get("status") not in _CONDITION_STATUSES:
            errors.append(not_supported(f"{at}.status", cond.get("status"), _CONDITION_STATUSES))
        if not cond.get("reason"):
            errors.append(required(f"{at}.reason"))
        if not cond.get("lastTransitionTime"):
            errors.append(required(f"{at}.lastTransitionTime"))
    return errors


def _shown(value: Any) -> str:
    """intstr.String(): the count or the percentage; N/A when unset (printPodDisruptionBudget)."""
    return "N/A" if value is None else str(value)


class PodDisruptionBudget(Kind):
    group = "policy"
    kind = "PodDisruptionBudget"
    plural = "poddisruptionbudgets"
    short_names = ("pdb",)
    schema = "V1PodDisruptionBudget"
    type_marks = TYPE_MARKS
    generation = True
    subresources = (StatusSubresource("PodDisruptionBudget", "policy"),)
    columns = (
        tables.NAME,
        tables.column("Min Available", desc="The minimum number of pods that must be available."),
        tables.column("Max Unavailable", desc="The maximum number of pods that may be unavailable."),
        tables.column(
            "Allowed Disruptions",
            kind="integer",
            desc="Calculated number of pods that may be disrupted at this time.",
        ),
        tables.AGE,
    )

    def prepare_for_create(self, obj: Obj) -> None:
        # An empty PodDisruptionBudgetStatus: its four counts are never omitted.
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_pdb_spec(obj.get("spec")) + validate_pdb_status(obj.get("status"))

    def cells(self, obj: Obj) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return [
            obj["metadata"].get("name"),
            _shown(spec.get("minAvailable")),
            _shown(spec.get("maxUnavailable")),
            status.get("disruptionsAllowed", 0),
            age(obj),
        ]


KIND = PodDisruptionBudget()
