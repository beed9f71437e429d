"""core/v1 PodTemplate: a named pod template (what controllers stamp pods from), no controller of its own."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds import podspec
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.validation import annotations, labels

Obj = dict[str, Any]


class PodTemplate(Kind):
    kind = "PodTemplate"
    plural = "podtemplates"
    schema = "V1PodTemplate"
    return_deleted_object = True
    type_marks = podspec.TYPE_MARKS
    columns = (
        tables.NAME,
        tables.column("Containers", desc="Names of each container in the template."),
        tables.column("Images", desc="Images referenced by each container in the template."),
        tables.column("Pod Labels", desc="The labels for the pod template."),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        podspec.default_template(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        """ValidatePodTemplateSpec at `template` (any restart policy: the template's user decides)."""
        template = obj.get("template") or {}
        meta = template.get("metadata") or {}
        return (
            labels("template.labels", meta.get("labels"))
            + annotations("template.annotations", meta.get("annotations"))
            + podspec.validate_pod_spec(template.get("spec") or {}, "template.spec")
        )

    def cells(self, obj: Obj) -> list[Any]:
        template = obj.get("template") or {}
        names, images = tables.containers_images(template.get("spec") or {})
        return [
            obj["metadata"].get("name"),
            names,
            images,
            tables.format_labels((template.get("metadata") or {}).get("labels")),
        ]


KIND = PodTemplate()
