"""core/v1 ReplicationController (upstream's pkg/registry/core/replicationcontroller): the ReplicaSet's
predecessor, kept by the same controller loop (controlplane/controllers/replicaset.py).

What differs from a ReplicaSet: the selector is a plain label map, defaulted (with the object's own
labels) from the template's labels, and it may change; the template is validated as upstream's
ValidatePodTemplateSpecForRC (restartPolicy Always, no activeDeadlineSeconds); its status is checked on
every status write (counts not negative nor above status.replicas); a DELETE that names no propagation
orphans the pods (upstream's DefaultGarbageCollectionPolicy for core/v1, kept for compatibility).
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import deletion, tables
from controlplane.apiserver.errors import FieldError, forbidden, invalid, not_supported, required
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import REFUSE_UNSUPPORTED, Kind, SelectableField, StatusSubresource
from controlplane.apiserver.kinds.scale import Scale, map_selector
from controlplane.apiserver.meta import age
from controlplane.apiserver.validation import annotations, labels, nonnegative

Obj = dict[str, Any]

_STATUS_COUNTS = (
    "replicas",
    "fullyLabeledReplicas",
    "readyReplicas",
    "availableReplicas",
    "observedGeneration",
)


def _validate_template(template: Any, selector: Obj) -> list[FieldError]:
    """ValidatePodTemplateSpecForRC at spec.template."""
    if not isinstance(template, dict):
        return [required("spec.template")]
    meta = template.get("metadata") or {}
    template_labels = meta.get("labels") or {}
    errors: list[FieldError] = []
    if selector and any(template_labels.get(k) != v for k, v in selector.items()):
        errors.append(
            invalid(
                "spec.template.metadata.labels",
                template_labels,
                "`selector` does not match template `labels`",
            )
        )
    errors += labels("spec.template.labels", template_labels)
    errors += annotations("spec.template.annotations", meta.get("annotations"))
    spec = template.get("spec")
    errors += podspec.validate_pod_spec(spec, "spec.template.spec")
    spec = spec if isinstance(spec, dict) else {}
    if spec.get("restartPolicy") != "Always":
        errors.append(
            not_supported("spec.template.spec.restartPolicy", spec.get("restartPolicy"), ["Always"])
        )
    if spec.get("activeDeadlineSeconds") is not None:
        errors.append(
            forbidden(
                "spec.template.spec.activeDeadlineSeconds",
                "activeDeadlineSeconds in ReplicationController is not Supported",
            )
        )
    return errors


def validate_status(status: Obj) -> list[FieldError]:
    """ValidateReplicationControllerStatus."""
    errors: list[FieldError] = []
    for name in _STATUS_COUNTS:
        errors += nonnegative(f"status.{name}", status.get(name, 0))
    replicas = status.get("replicas", 0)
    for name in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
        count = status.get(name, 0)
        if count > replicas:
            errors.append(invalid(f"status.{name}", count, "cannot be greater than status.replicas"))
    available = status.get("availableReplicas", 0)
    if available > status.get("readyReplicas", 0):
        errors.append(invalid("status.availableReplicas", available, "cannot be greater than readyReplicas"))
    return errors


class ReplicationController(Kind):
    kind = "ReplicationController"
    plural = "replicationcontrollers"
    etcd_resource_prefix = "controllers"  # upstream's SpecialDefaultResourcePrefixes
    short_names = ("rc",)
    categories = ("all",)
    subresources = (StatusSubresource("ReplicationController"), Scale(map_selector))
    schema = "V1ReplicationController"
    type_marks = podspec.TYPE_MARKS
    field_selectors = (SelectableField("status.replicas", missing="0"),)  # upstream: Itoa(Status.Replicas)
    field_refusal = REFUSE_UNSUPPORTED
    generation = True
    gc_policy = deletion.ORPHAN_DEPENDENTS
    columns = (
        tables.NAME,
        tables.column(
            "Desired",
            kind="integer",
            desc=(
                "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero "
                "and unspecified. Defaults to 1. More info: "
                "https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"
            ),
        ),
        tables.column(
            "Current",
            kind="integer",
            desc=(
                "Replicas is the most recently observed number of replicas. More info: "
                "https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller"
            ),
        ),
        tables.column(
            "Ready", kind="integer", desc="The number of ready replicas for this replication controller."
        ),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column(
            "Selector",
            1,
            desc=(
                "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it "
                "is defaulted to the labels present on the Pod template. Label keys and values that must match in "
                "order to be controlled by this replication controller, if empty defaulted to labels on Pod template. "
                "More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"
            ),
        ),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        """SetDefaults_ReplicationController: selector and labels from the template's labels, 1 replica."""
        spec = obj.setdefault("spec", {})
        template = spec.get("template")
        template_labels = (
            (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
        )
        if template_labels:
            if not spec.get("selector"):
                spec["selector"] = dict(template_labels)
            meta = obj.setdefault("metadata", {})
            if not meta.get("labels"):
                meta["labels"] = dict(template_labels)
        spec.setdefault("replicas", 1)
        podspec.default_template(spec)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        """ValidateReplicationControllerSpec."""
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        selector = spec.get("selector") or {}
        errors = nonnegative("spec.minReadySeconds", spec.get("minReadySeconds", 0))
        if not selector:
            errors.append(required("spec.selector"))
        errors += labels("spec.selector", selector)
        errors += nonnegative("spec.replicas", spec.get("replicas", 0))
        return errors + _validate_template(spec.get("template"), selector)

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        return validate_status(new.get("status") or {}) if subresource == "status" else []

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"),
            spec.get("replicas", 0),
            status.get("replicas", 0),
            status.get("readyReplicas", 0),
            age(obj),
            names,
            images,
            tables.format_labels(spec.get("selector")),
        ]


KIND = ReplicationController()
