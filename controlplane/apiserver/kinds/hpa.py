"""autoscaling/v2 HorizontalPodAutoscaler (the stored form; autoscaling/v1 converts to it, hpav1.py).

Defaults as upstream's SetDefaults_HorizontalPodAutoscaler (minReplicas 1; no metrics means cpu at 80%
Utilization; a behavior given is filled with the default rules: scale up stabilization 0, policies
Pods 4 and Percent 100 per 15 s, Max; scale down Percent 100 per 15 s, Max, its stabilization window
left to the controller's --horizontal-pod-autoscaler-downscale-stabilization), the validation of
ValidateHorizontalPodAutoscaler (texts as upstream's), the printer's columns (`cpu: 12%/50%`).
"""

from __future__ import annotations

import copy
from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import dns_subdomain, path_segment

Obj = dict[str, Any]
METRIC_TYPES = ("ContainerResource", "External", "Object", "Pods", "Resource")
TARGET_TYPES = ("AverageValue", "Utilization", "Value")
SCALE_UP_DEFAULT: Obj = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ],
}
SCALE_DOWN_DEFAULT: Obj = {
    "selectPolicy": "Max",
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
}
MAX_STABILIZATION = 3600
MAX_PERIOD = 1800

COLUMNS = (
    tables.NAME,
    tables.column("Reference", desc="The reference to the scale target."),
    tables.column("Targets", desc="The current and target metric values."),
    tables.column("MinPods", desc="The minimum number of replicas."),
    tables.column("MaxPods", kind="integer", desc="The maximum number of replicas."),
    tables.column("Replicas", kind="integer", desc="The current number of replicas."),
    tables.AGE,
)


def fill_rules(rules: Obj | None, default: Obj) -> Obj:
    """upstream's GenerateHPAScale{Up,Down}Rules: the default for anything not set."""
    if rules is None:
        return copy.deepcopy(default)
    out = dict(rules)
    if not out.get("policies"):
        out["policies"] = copy.deepcopy(default["policies"])
    if out.get("selectPolicy") is None:
        out["selectPolicy"] = default["selectPolicy"]
    if out.get("stabilizationWindowSeconds") is None and "stabilizationWindowSeconds" in default:
        out["stabilizationWindowSeconds"] = default["stabilizationWindowSeconds"]
    return out


def default_spec(spec: Obj) -> None:
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
            }
        ]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        behavior["scaleUp"] = fill_rules(behavior.get("scaleUp"), SCALE_UP_DEFAULT)
        behavior["scaleDown"] = fill_rules(behavior.get("scaleDown"), SCALE_DOWN_DEFAULT)


def _target(path: str, target: Any) -> list[FieldError]:
    if not isinstance(target, dict):
        return [required(path, "must specify a metric target")]
    errs: list[FieldError] = []
    kind = target.get("type")
    if not kind:
        errs.append(required(f"{path}.type", "must specify a metric target type"))
    elif kind not in TARGET_TYPES:
        errs.append(not_supported(f"{path}.type", kind, list(TARGET_TYPES)))
    utilization = target.get("averageUtilization")
    if utilization is not None and utilization < 1:
        errs.append(invalid(f"{path}.averageUtilization", utilization, "must be greater than 0"))
    if kind == "Utilization" and utilization is None:
        errs.append(
            required(
                f"{path}.averageUtilization",
                "must set averageUtilization when metric target type is Utilization",
            )
        )
    if kind == "AverageValue" and target.get("averageValue") is None:
        errs.append(
            required(f"{path}.averageValue", "must set averageValue when metric target type is AverageValue")
        )
    if kind == "Value" and target.get("value") is None:
        errs.append(required(f"{path}.value", "must set value when metric target type is Value"))
    return errs


def _metric(path: str, metric: Obj) -> list[FieldError]:
    kind = metric.get("type")
    if not kind:
        return [required(f"{path}.type", "must specify a metric source type")]
    if kind not in METRIC_TYPES:
        return [not_supported(f"{path}.type", kind, list(METRIC_TYPES))]
    field = kind[0].lower() + kind[1:]
    source = metric.get(field)
    if not isinstance(source, dict):
        return [
            required(
                f"{path}.{field}", f"must populate information for the given metric source (type {kind})"
            )
        ]
    errs: list[FieldError] = []
    if kind in ("Resource", "ContainerResource"):
        if not source.get("name"):
            errs.append(required(f"{path}.{field}.name", "must specify a resource name"))
        if kind == "ContainerResource" and not source.get("container"):
            errs.append(required(f"{path}.{field}.container", "must specify a container"))
        target = source.get("target")
        errs += _target(f"{path}.{field}.target", target)
        if isinstance(target, dict) and target.get("type") == "Value":
            errs.append(
                invalid(f"{path}.{field}.target.type", "Value", "must be either Utilization or AverageValue")
            )
    else:
        if not (source.get("metric") or {}).get("name"):
            errs.append(required(f"{path}.{field}.metric.name", "must specify a metric name"))
        errs += _target(f"{path}.{field}.target", source.get("target"))
    return errs


def _rules(path: str, rules: Any) -> list[FieldError]:
    if not isinstance(rules, dict):
        return []
    errs: list[FieldError] = []
    window = rules.get("stabilizationWindowSeconds")
    if window is not None and window < 0:
        errs.append(
            invalid(f"{path}.stabilizationWindowSeconds", window, "must be greater than or equal to zero")
        )
    if window is not None and window > MAX_STABILIZATION:
        errs.append(
            invalid(
                f"{path}.stabilizationWindowSeconds",
                window,
                f"must be less than or equal to {MAX_STABILIZATION}",
            )
        )
    select = rules.get("selectPolicy")
    if select is not None and select not in ("Disabled", "Max", "Min"):
        errs.append(not_supported(f"{path}.selectPolicy", select, ["Disabled", "Max", "Min"]))
    policies = rules.get("policies") or []
    if not policies and "policies" in rules:
        errs.append(required(f"{path}.policies", "must specify at least one Policy"))
    for i, policy in enumerate(policies):
        at = f"{path}.policies[{i}]"
        if policy.get("type") not in ("Pods", "Percent"):
            errs.append(not_supported(f"{at}.type", policy.get("type"), ["Percent", "Pods"]))
        value = policy.get("value")
        if not isinstance(value, int) or value <= 0:
            errs.append(invalid(f"{at}.value", value, "must be greater than zero"))
        period = policy.get("periodSeconds")
        if not isinstance(period, int) or period <= 0:
            errs.append(invalid(f"{at}.periodSeconds", period, "must be greater than zero"))
        elif period > MAX_PERIOD:
            errs.append(invalid(f"{at}.periodSeconds", period, f"must be less than or equal to {MAX_PERIOD}"))
    return errs


def validate_spec(spec: Obj) -> list[FieldError]:
    errs: list[FieldError] = []
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("kind"):
        errs.append(required("spec.scaleTargetRef.kind", ""))
    else:
        errs += [invalid("spec.scaleTargetRef.kind", ref["kind"], m) for m in path_segment(ref["kind"])]
    if not ref.get("name"):
        errs.append(required("spec.scaleTargetRef.name", ""))
    else:
        errs += [invalid("spec.scaleTargetRef.name", ref["name"], m) for m in path_segment(ref["name"])]
    minimum, maximum = spec.get("minReplicas"), spec.get("maxReplicas") or 0
    if minimum is not None and minimum < 1:
        errs.append(invalid("spec.minReplicas", minimum, "must be greater than or equal to 1"))
    if maximum < 1:
        errs.append(invalid("spec.maxReplicas", maximum, "must be greater than 0"))
    if minimum is not None and maximum < minimum:
        errs.append(invalid("spec.maxReplicas", maximum, "must be greater than or equal to `minReplicas`"))
    for i, metric in enumerate(spec.get("metrics") or []):
        errs += _metric(f"spec.metrics[{i}]", metric)
    behavior = spec.get("behavior") or {}
    errs += _rules("spec.behavior.scaleUp", behavior.get("scaleUp"))
    errs += _rules("spec.behavior.scaleDown", behavior.get("scaleDown"))
    return errs


def _current(statuses: list[Obj], i: int, field: str, value: str) -> Any:
    if i < len(statuses):
        source = statuses[i].get(field) or {}
        return (source.get("current") or {}).get(value)
    return None


def format_metrics(specs: list[Obj], statuses: list[Obj]) -> str:
    """upstream's formatHPAMetrics (1.32): `cpu: 12%/50%`, at most two, then `+ N more...`."""
    if not specs:
        return "<none>"
    out = []
    for i, spec in enumerate(specs):
        kind = spec.get("type", "")
        field = kind[:1].lower() + kind[1:]
        source = spec.get(field) or {}
        target = source.get("target") or {}
        if kind in ("Resource", "ContainerResource"):
            name = source.get("name", "")
            if target.get("averageValue") is not None:
                current = _current(statuses, i, field, "averageValue") or "<unknown>"
                out.append(f"{name}: {current}/{target['averageValue']}")
            else:
                used = _current(statuses, i, field, "averageUtilization")
                current = f"{used}%" if used is not None else "<unknown>"
                wanted = (
                    f"{target['averageUtilization']}%"
                    if target.get("averageUtilization") is not None
                    else "<auto>"
                )
                out.append(f"{name}: {current}/{wanted}")
        elif kind in ("Pods", "Object", "External"):
            value_key = "averageValue" if target.get("averageValue") is not None else "value"
            current = _current(statuses, i, field, value_key) or "<unknown>"
            suffix = " (avg)" if value_key == "averageValue" and kind != "Pods" else ""
            out.append(f"{current}/{target.get(value_key)}{suffix}")
        else:
            out.append("<unknown type>")
    if len(out) > 2:
        return f"{', '.join(out[:2])} + {len(out) - 2} more..."
    return ", ".join(out)


def cells(obj: Obj) -> list[Any]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    minimum = spec.get("minReplicas")
    return [
        obj["metadata"].get("name"),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        format_metrics(spec.get("metrics") or [], status.get("currentMetrics") or []),
        str(minimum) if minimum is not None else "<unset>",
        spec.get("maxReplicas", 0),
        status.get("currentReplicas", 0),
        age(obj),
    ]


class HorizontalPodAutoscaler(Kind):
    group = "autoscaling"
    version = "v2"
    kind = "HorizontalPodAutoscaler"
    plural = "horizontalpodautoscalers"
    short_names = ("hpa",)
    categories = ("all",)
    schema = "V2HorizontalPodAutoscaler"
    subresources = (StatusSubresource(),)
    generation = True
    columns = COLUMNS
    type_marks = {
        ("V2MetricTarget", "averageValue"): "quantity",
        ("V2MetricTarget", "value"): "quantity",
        ("V2MetricValueStatus", "averageValue"): "quantity",
        ("V2MetricValueStatus", "value"): "quantity",
    }

    def default(self, obj: Obj, creating: bool) -> None:
        default_spec(obj.setdefault("spec", {}))

    def prepare_for_create(self, obj: Obj) -> None:
        obj["status"] = {"desiredReplicas": 0}  # upstream resets it; desiredReplicas has no omitempty

    def validate_name(self, path: str, name: str) -> list[FieldError]:
        return dns_subdomain(path, name)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_spec(obj.get("spec") or {})

    def cells(self, obj: Obj) -> list[Any]:
        return cells(obj)


KIND = HorizontalPodAutoscaler()
