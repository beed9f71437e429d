"""apps/v1 Deployment: defaults and validation as upstream's (strategy, rolling-update bounds, deadlines);
the controller manager's deployment loop rolls it out. A status update may not change its labels
(upstream's deploymentStatusStrategy)."""

from __future__ import annotations

import re
from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds.workload import Workload
from controlplane.apiserver.meta import age

Obj = dict[str, Any]

_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_MSG = (
    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex "
    "used for validation is '[0-9]+%')"
)
_NONNEGATIVE = "must be greater than or equal to 0"
_STRATEGIES = ["Recreate", "RollingUpdate"]


def _int_or_percent(path: str, value: Any) -> tuple[list[FieldError], int]:
    """upstream's ValidatePositiveIntOrPercent, and the value's number (percent or count)."""
    if isinstance(value, str):
        if not _PERCENT.match(value):
            return [invalid(path, value, _PERCENT_MSG)], -1
        return [], int(value[:-1])
    if isinstance(value, int):
        return ([invalid(path, value, _NONNEGATIVE)] if value < 0 else []), value
    return [], 0


def validate_strategy(strategy: Any, path: str = "spec.strategy") -> list[FieldError]:
    """upstream's ValidateDeploymentStrategy and ValidateRollingUpdateDeployment."""
    if not isinstance(strategy, dict):
        return []
    kind = strategy.get("type")
    rolling = strategy.get("rollingUpdate")
    if kind == "Recreate":
        return (
            [forbidden(f"{path}.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'")]
            if rolling
            else []
        )
    if kind != "RollingUpdate":
        return [not_supported(f"{path}.type", kind, _STRATEGIES)]
    if not isinstance(rolling, dict):
        return [required(f"{path}.rollingUpdate", "this should be defaulted and never be nil")]
    errors, unavailable = _int_or_percent(
        f"{path}.rollingUpdate.maxUnavailable", rolling.get("maxUnavailable")
    )
    surge_errors, surge = _int_or_percent(f"{path}.rollingUpdate.maxSurge", rolling.get("maxSurge"))
    errors += surge_errors
    if unavailable == 0 and surge == 0:
        errors.append(
            invalid(
                f"{path}.rollingUpdate.maxUnavailable",
                rolling.get("maxUnavailable"),
                "may not be 0 when `maxSurge` is 0",
            )
        )
    if isinstance(rolling.get("maxUnavailable"), str) and unavailable > 100:
        errors.append(
            invalid(
                f"{path}.rollingUpdate.maxUnavailable",
                rolling["maxUnavailable"],
                "must not be greater than 100%",
            )
        )
    return errors


class Deployment(Workload):
    kind = "Deployment"
    plural = "deployments"
    short_names = ("deploy",)
    schema = "V1Deployment"
    columns = (
        tables.NAME,
        tables.column("Ready", desc="Number of the pod with ready state"),
        tables.column(
            "Up-to-date",
            kind="integer",
            desc="Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
        ),
        tables.column(
            "Available",
            kind="integer",
            desc="Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
        ),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column(
            "Selector",
            1,
            desc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
        ),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        super().default(obj, creating)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        errors = super().validate_spec(obj)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return errors
        errors += validate_strategy(spec.get("strategy"))
        min_ready = spec.get("minReadySeconds") or 0
        if isinstance(min_ready, int) and min_ready < 0:
            errors.append(invalid("spec.minReadySeconds", min_ready, _NONNEGATIVE))
        history = spec.get("revisionHistoryLimit")
        if isinstance(history, int) and history < 0:
            errors.append(invalid("spec.revisionHistoryLimit", history, _NONNEGATIVE))
        deadline = spec.get("progressDeadlineSeconds")
        if isinstance(deadline, int):
            if deadline < 0:
                errors.append(invalid("spec.progressDeadlineSeconds", deadline, _NONNEGATIVE))
            if isinstance(min_ready, int) and deadline <= min_ready:
                errors.append(
                    invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
                )
        return errors

    def prepare_for_status_update(self, new: Obj, old: Obj) -> None:
        labels = (old.get("metadata") or {}).get("labels")
        if labels is None:
            new["metadata"].pop("labels", None)
        else:
            new["metadata"]["labels"] = labels

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"),
            f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            status.get("updatedReplicas", 0),
            status.get("availableReplicas", 0),
            age(obj),
            names,
            images,
            tables.format_selector(spec.get("selector")),
        ]


KIND = Deployment()
