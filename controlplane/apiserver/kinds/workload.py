"""What Deployments and ReplicaSets share: replicas, a selector that matches the pod template's labels
and never changes, a template whose pods always restart (upstream's apps validation)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.scale import SCALE
from controlplane.apiserver.validation import labels
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]

TYPE_MARKS = {
    **podspec.TYPE_MARKS,
    ("V1RollingUpdateDeployment", "maxSurge"): "int-or-string",
    ("V1RollingUpdateDeployment", "maxUnavailable"): "int-or-string",
}


def validate_workload(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    replicas = spec.get("replicas")
    if replicas is not None and replicas < 0:
        errors.append(invalid("spec.replicas", replicas, "must be greater than or equal to 0"))
    selector = spec.get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.append(required("spec.selector"))
        selector = None
    template = spec.get("template")
    if not isinstance(template, dict):
        errors.append(required("spec.template"))
        return errors
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    errors += labels("spec.template.metadata.labels", template_labels)
    if selector is not None:
        try:
            matches = from_label_selector(selector).matches(template_labels)
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
    errors += podspec.validate_pod_spec(template.get("spec"), "spec.template.spec")
    restart = (template.get("spec") or {}).get("restartPolicy")
    if restart not in (None, "Always"):
        errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
    return errors


def validate_selector_unchanged(new: Obj, old: Obj) -> list[FieldError]:
    new_selector = (new.get("spec") or {}).get("selector")
    if (old.get("spec") or {}).get("selector") != new_selector:
        return [invalid("spec.selector", new_selector, "field is immutable")]
    return []


class Workload(Kind):
    """The strategy Deployments and ReplicaSets share (apps group, status and scale subresources,
    generation, a pod template); each names its columns and defaults."""

    group = "apps"
    categories = ("all",)
    type_marks = TYPE_MARKS
    generation = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.subresources = (StatusSubresource(cls.kind, cls.group), SCALE)

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        podspec.default_template(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_workload(obj)

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return validate_selector_unchanged(new, old)
