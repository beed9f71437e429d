"""batch/v1 Job: upstream's defaults (SetDefaults_Job), the generated selector and its labels, validation
(ValidateJob, ValidateJobUpdate: what never changes once the Job exists) and kubectl's columns; the
controller manager's job loop runs it, the ttl-after-finished loop deletes it when asked to.

A DELETE naming no propagation orphans the Job's pods, as upstream's batch/v1 strategy
(DefaultGarbageCollectionPolicy); kubectl always asks for background deletion.
"""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import deletion, tables
from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds import jobspec, podspec
from controlplane.apiserver.kinds.base import REFUSE_BATCH, Kind, SelectableField, StatusSubresource
from controlplane.apiserver.meta import age, human_duration, now, parse_time
from controlplane.apiserver.validation import immutable

Obj = dict[str, Any]

# The scheduling directives a suspended Job that never started may still change
# (validatePodTemplateUpdate with AllowMutableSchedulingDirectives).
_MUTABLE_WHILE_SUSPENDED = ("nodeSelector", "tolerations", "affinity", "schedulingGates")


def default_job(obj: Obj) -> None:
    """SetDefaults_Job."""
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", jobspec.NON_INDEXED)
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        for pattern in rule.get("onPodConditions") or []:
            pattern.setdefault("status", "True")
    podspec.default_template(spec)


def has_condition(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def job_status(obj: Obj) -> str:
    """printJob's STATUS column."""
    if has_condition(obj, "Complete"):
        return "Complete"
    if has_condition(obj, "Failed"):
        return "Failed"
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for kind in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if has_condition(obj, kind):
            return kind
    return "Running"


def completions_cell(spec: Obj, status: Obj) -> str:
    succeeded = status.get("succeeded", 0)
    if spec.get("completions") is not None:
        return f"{succeeded}/{spec['completions']}"
    parallelism = spec.get("parallelism") or 0
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def duration_cell(status: Obj) -> str:
    start = parse_time(status.get("startTime"))
    if start is None:
        return ""
    end = parse_time(status.get("completionTime")) or now()
    return human_duration(end - start)


class Job(Kind):
    group = "batch"
    kind = "Job"
    plural = "jobs"
    categories = ("all",)
    schema = "V1Job"
    # batch/v1's label conversion; the strategy exposes status.succeeded as status.successful
    field_selectors = (SelectableField("status.successful", "status.succeeded", missing="0"),)
    field_refusal = REFUSE_BATCH
    type_marks = jobspec.TYPE_MARKS
    generation = True
    gc_policy = deletion.ORPHAN_DEPENDENTS
    subresources = (StatusSubresource("Job", "batch"),)
    columns = (
        tables.NAME,
        tables.column("Status", desc="Status of the job."),
        tables.column("Completions", desc="The number of pods which reached phase Succeeded."),
        tables.column("Duration", desc="Time required to complete the job."),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column("Selector", 1, desc="A label query over pods that should match the pod count."),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        default_job(obj)

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)
        spec = obj.get("spec") or {}
        if not spec.get("manualSelector"):
            jobspec.generate_selector(obj)
        meta = obj["metadata"]
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if template_labels and not meta.get("labels"):
            meta["labels"] = dict(template_labels)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        spec = obj.get("spec")
        errors = jobspec.validate_generated_selector(obj)
        errors += jobspec.validate_job_spec(spec, "spec")
        if isinstance(spec, dict) and isinstance(spec.get("template"), dict):
            errors += jobspec.validate_selector(spec, "spec")
        return errors

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if subresource:
            return []
        spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        errors = (
            immutable("spec.completions", spec.get("completions"), old_spec.get("completions"))
            if not _elastic_indexed(spec, old_spec)
            else []
        )
        errors += immutable("spec.selector", spec.get("selector"), old_spec.get("selector"))
        errors += _template_update(new, old)
        for name in (
            "completionMode",
            "podFailurePolicy",
            "backoffLimitPerIndex",
            "managedBy",
            "successPolicy",
        ):
            errors += immutable(f"spec.{name}", spec.get(name), old_spec.get(name))
        return errors

    def cells(self, obj: Obj) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"),
            job_status(obj),
            completions_cell(spec, status),
            duration_cell(status),
            age(obj),
            names,
            images,
            tables.format_selector(spec.get("selector")),
        ]


def _elastic_indexed(spec: Obj, old: Obj) -> bool:
    """An Indexed Job may change completions together with parallelism, kept equal (elastic Jobs)."""
    return (
        spec.get("completionMode") == jobspec.INDEXED
        and old.get("completionMode") == jobspec.INDEXED
        and spec.get("completions") == spec.get("parallelism")
        and old.get("completions") == old.get("parallelism")
    )


def _template_update(new: Obj, old: Obj) -> list[FieldError]:
    template, old_template = (new.get("spec") or {}).get("template"), (old.get("spec") or {}).get("template")
    suspended = (new.get("spec") or {}).get("suspend") and not (old.get("status") or {}).get("startTime")
    if suspended and isinstance(template, dict) and isinstance(old_template, dict):
        # Only the scheduling directives and the template's labels and annotations may change.
        def rest(t: Obj) -> Obj:
            pod_spec = {k: v for k, v in (t.get("spec") or {}).items() if k not in _MUTABLE_WHILE_SUSPENDED}
            tmeta = {k: v for k, v in (t.get("metadata") or {}).items() if k not in ("labels", "annotations")}
            return {"metadata": tmeta, "spec": pod_spec}

        return (
            immutable("spec.template", template, old_template) if rest(template) != rest(old_template) else []
        )
    return immutable("spec.template", template, old_template)


KIND = Job()
