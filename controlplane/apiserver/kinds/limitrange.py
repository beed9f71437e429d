"""core/v1 LimitRange: upstream's defaults for Container items (a missing default limit is the max, a
missing default request the default limit, else the min: SetDefaults_LimitRangeItem) and
ValidateLimitRange (known types, each once; resource names; no defaults on Pod items; a PVC item bounds
storage; min <= defaultRequest <= default <= max; maxLimitRequestRatio >= 1 and within max/min), and the
LimitRanger admission plugin (`controlplane/apiserver/quota/limitranger.py`)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, duplicate, forbidden, invalid, required
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.quota.limitranger import CLAIM, CONTAINER, POD, LimitRanger
from controlplane.apiserver.validation import quantity
from kubeclient import names
from kubeclient.quantity import Quantity

Obj = dict[str, Any]

TYPES = (POD, CONTAINER, CLAIM)
CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
FIELDS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


def _type_name(path: str, value: str) -> list[FieldError]:
    problems = [invalid(path, value, m) for m in names.qualified_name(value)]
    if not problems and "/" not in value and value not in TYPES:
        problems.append(invalid(path, value, "must be a standard limit type or fully qualified"))
    return problems


def _resource_name(kind: str, path: str, name: str) -> list[FieldError]:
    """validateLimitRangeResourceName: container resources for Pod/Container items, else any standard."""
    problems = [invalid(path, name, m) for m in names.qualified_name(name)]
    if problems or "/" in name:
        return problems
    if kind in (POD, CONTAINER):
        if name not in CONTAINER_RESOURCES and not name.startswith("hugepages-"):
            return [invalid(path, name, "must be a standard resource for containers")]
    elif name not in ("storage", "cpu", "memory", "ephemeral-storage"):
        return [invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def _overcommit_allowed(name: str) -> bool:
    return ("/" not in name or "kubernetes.io/" in name) and not name.startswith("hugepages-")


def _compare(item_path: str, k: str, values: dict[str, dict[str, Quantity]]) -> list[FieldError]:
    lo, hi = values["min"].get(k), values["max"].get(k)
    dflt, dreq = values["default"].get(k), values["defaultRequest"].get(k)
    ratio = values["maxLimitRequestRatio"].get(k)
    at = lambda field: f"{item_path}.{field}[{k}]"  # noqa: E731
    out: list[FieldError] = []
    if lo is not None and hi is not None and lo.amount > hi.amount:
        out.append(invalid(at("min"), str(lo), f"min value {lo} is greater than max value {hi}"))
    if dreq is not None and lo is not None and lo.amount > dreq.amount:
        out.append(
            invalid(
                at("defaultRequest"),
                str(dreq),
                f"min value {lo} is greater than default request value {dreq}",
            )
        )
    if dreq is not None and hi is not None and dreq.amount > hi.amount:
        out.append(
            invalid(
                at("defaultRequest"),
                str(dreq),
                f"default request value {dreq} is greater than max value {hi}",
            )
        )
    if dreq is not None and dflt is not None and dreq.amount > dflt.amount:
        out.append(
            invalid(
                at("defaultRequest"),
                str(dreq),
                f"default request value {dreq} is greater than default limit value {dflt}",
            )
        )
    if dflt is not None and lo is not None and lo.amount > dflt.amount:
        out.append(invalid(at("default"), str(lo), f"min value {lo} is greater than default value {dflt}"))
    if dflt is not None and hi is not None and dflt.amount > hi.amount:
        out.append(invalid(at("default"), str(hi), f"default value {dflt} is greater than max value {hi}"))
    if ratio is not None and ratio.amount < 1:
        out.append(invalid(at("maxLimitRequestRatio"), str(ratio), f"ratio {ratio} is less than 1"))
    if ratio is not None and lo is not None and hi is not None and lo.milli_value() > 0:
        limit = hi.milli_value() / lo.milli_value()
        if ratio.milli_value() / 1000 > limit:
            out.append(
                invalid(
                    at("maxLimitRequestRatio"),
                    str(ratio),
                    f"ratio {ratio} is greater than max/min = {limit:f}",
                )
            )
    if not _overcommit_allowed(k) and dflt is not None and dreq is not None and dflt.amount != dreq.amount:
        out.append(
            invalid(
                at("defaultRequest"),
                str(dreq),
                f"default value {dflt} must equal to defaultRequest value {dreq} in {k}",
            )
        )
    return out


def validate_item(i: int, item: Obj, seen: set[str]) -> list[FieldError]:
    path = f"spec.limits[{i}]"
    kind = str(item.get("type") or "")
    problems = _type_name(f"{path}.type", kind)
    if kind in seen:
        problems.append(duplicate(f"{path}.type", kind))
    seen.add(kind)
    values: dict[str, dict[str, Quantity]] = {f: {} for f in FIELDS}
    for field in FIELDS:
        if kind == POD and field in ("default", "defaultRequest"):
            if item.get(field):
                problems.append(forbidden(f"{path}.{field}", "may not be specified when `type` is 'Pod'"))
            continue
        for name, text in (item.get(field) or {}).items():
            problems += _resource_name(kind, f"{path}.{field}[{name}]", name)
            q = quantity(text) if isinstance(text, str) else None
            if q is not None:
                values[field][name] = q
    if (
        kind == CLAIM
        and "storage" not in (item.get("min") or {})
        and "storage" not in (item.get("max") or {})
    ):
        problems.append(
            required(
                f"{path}.limits",
                "either minimum or maximum storage value is required, but neither was provided",
            )
        )
    keys = sorted({k for field in FIELDS for k in values[field]})
    for k in keys:
        problems += _compare(path, k, values)
    return problems


class LimitRange(Kind):
    kind = "LimitRange"
    plural = "limitranges"
    short_names = ("limits",)
    schema = "V1LimitRange"
    type_marks = {("V1LimitRangeItem", f): "map[quantity]" for f in FIELDS}

    def default(self, obj: Obj, creating: bool) -> None:
        """SetDefaults_LimitRangeItem for Container items."""
        for item in (obj.get("spec") or {}).get("limits") or []:
            if not isinstance(item, dict) or item.get("type") != CONTAINER:
                continue
            dflt = item.setdefault("default", {})
            dreq = item.setdefault("defaultRequest", {})
            for key, value in (item.get("max") or {}).items():
                dflt.setdefault(key, value)
            for key, value in dflt.items():
                dreq.setdefault(key, value)
            for key, value in (item.get("min") or {}).items():
                dreq.setdefault(key, value)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        seen: set[str] = set()
        problems: list[FieldError] = []
        for i, item in enumerate((obj.get("spec") or {}).get("limits") or []):
            problems += validate_item(i, item if isinstance(item, dict) else {}, seen)
        return problems


KIND = LimitRange()
LimitRange.admission = (LimitRanger(KIND),)
