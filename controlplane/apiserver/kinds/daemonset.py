"""apps/v1 DaemonSet: upstream's defaults (RollingUpdate with maxUnavailable 1 and maxSurge 0, history of
10), validation (ValidateDaemonSet: a selector matching the template's labels and never changing, pods
that always restart, the rolling-update bounds: exactly one of maxSurge and maxUnavailable non-zero)
and kubectl's columns; the template generation annotation upstream's strategy keeps
(`deprecated.daemonset.template.generation`, one more on every template change). The controller
manager's daemonset loop places its pods.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.deployment import _int_or_percent
from controlplane.apiserver.kinds.workload import validate_selector_unchanged
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import labels, nonnegative
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
STRATEGIES = ["OnDelete", "RollingUpdate"]
TYPE_MARKS = {
    **podspec.TYPE_MARKS,
    ("V1RollingUpdateDaemonSet", "maxSurge"): "int-or-string",
    ("V1RollingUpdateDaemonSet", "maxUnavailable"): "int-or-string",
}


def validate_rolling(rolling: Any, path: str) -> list[FieldError]:
    """ValidateRollingUpdateDaemonSet."""
    if not isinstance(rolling, dict):
        return [required(path, "this should be defaulted and never be nil")]
    errors, unavailable = _int_or_percent(f"{path}.maxUnavailable", rolling.get("maxUnavailable"))
    surge_errors, surge = _int_or_percent(f"{path}.maxSurge", rolling.get("maxSurge"))
    errors += surge_errors
    for name, value in (("maxUnavailable", unavailable), ("maxSurge", surge)):
        if isinstance(rolling.get(name), str) and value > 100:
            errors.append(invalid(f"{path}.{name}", rolling[name], "must not be greater than 100%"))
    if unavailable > 0 and surge > 0:
        errors.append(
            invalid(
                f"{path}.maxSurge", rolling.get("maxSurge"), "may not be set when maxUnavailable is non-zero"
            )
        )
    elif unavailable <= 0 and surge <= 0:
        errors.append(required(f"{path}.maxUnavailable", "cannot be 0 when maxSurge is 0"))
    return errors


def validate_daemonset_spec(spec: Any) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    selector = spec.get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(required("spec.selector"))
        selector = None
    template = spec.get("template")
    if not isinstance(template, dict):
        return [*errors, required("spec.template")]
    template_labels = (template.get("metadata") or {}).get("labels")
    errors += labels("spec.template.metadata.labels", template_labels)
    if selector is not None:
        try:
            matches = from_label_selector(selector).matches(template_labels or {})
        except SelectorError as err:
            errors.append(invalid("spec.selector", selector, str(err)))
        else:
            if not matches:
                errors.append(
                    invalid(
                        "spec.template.metadata.labels",
                        template_labels,
                        "`selector` does not match template `labels`",
                    )
                )
    pod_spec = template.get("spec")
    errors += podspec.validate_pod_spec(pod_spec, "spec.template.spec")
    if isinstance(pod_spec, dict):
        restart = pod_spec.get("restartPolicy")
        if restart not in (None, "Always"):
            errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
        if pod_spec.get("activeDeadlineSeconds") is not None:
            errors.append(
                forbidden(
                    "spec.template.spec.activeDeadlineSeconds",
                    "activeDeadlineSeconds in DaemonSet is not Supported",
                )
            )
    errors += nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    errors += nonnegative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    strategy = spec.get("updateStrategy") or {}
    kind = strategy.get("type")
    if kind not in STRATEGIES:
        errors.append(not_supported("spec.updateStrategy.type", kind or "", STRATEGIES))
    elif kind == "RollingUpdate":
        errors += validate_rolling(strategy.get("rollingUpdate"), "spec.updateStrategy.rollingUpdate")
    return errors


class DaemonSet(Kind):
    group = "apps"
    kind = "DaemonSet"
    plural = "daemonsets"
    short_names = ("ds",)
    categories = ("all",)
    schema = "V1DaemonSet"
    type_marks = TYPE_MARKS
    generation = True
    subresources = (StatusSubresource("DaemonSet", "apps"),)
    columns = (
        tables.NAME,
        tables.column(
            "Desired", kind="integer", desc="The total number of nodes that should be running the daemon pod."
        ),
        tables.column(
            "Current",
            kind="integer",
            desc="The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
        ),
        tables.column(
            "Ready",
            kind="integer",
            desc="The number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
        ),
        tables.column(
            "Up-to-date", kind="integer", desc="The total number of nodes that are running updated daemon pod"
        ),
        tables.column(
            "Available",
            kind="integer",
            desc="The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
        ),
        tables.column(
            "Node Selector",
            desc="NodeSelector is a selector which must be true for the pod to fit on a node.",
        ),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column("Selector", 1, desc="A label query over pods that are managed by the daemon set."),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        strategy = spec.setdefault("updateStrategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", 1)
            rolling.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
        podspec.default_template(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        obj["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = "1"

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        super().prepare_for_update(new, old)
        generation = (old["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION, "1")
        if (new.get("spec") or {}).get("template") != (old.get("spec") or {}).get("template"):
            try:
                generation = str(int(generation) + 1)
            except ValueError:
                generation = "1"
        new["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = generation

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_daemonset_spec(obj.get("spec"))

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return validate_selector_unchanged(new, old)

    def cells(self, obj: Obj) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        pod_spec = (spec.get("template") or {}).get("spec") or {}
        names, images = tables.containers_images(pod_spec)
        return [
            obj["metadata"].get("name"),
            status.get("desiredNumberScheduled", 0),
            status.get("currentNumberScheduled", 0),
            status.get("numberReady", 0),
            status.get("updatedNumberScheduled", 0),
            status.get("numberAvailable", 0),
            tables.format_labels(pod_spec.get("nodeSelector")),
            age(obj),
            names,
            images,
            tables.format_selector(spec.get("selector")),
        ]


KIND = DaemonSet()
