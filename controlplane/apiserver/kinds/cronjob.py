"""batch/v1 CronJob: upstream's defaults (SetDefaults_CronJob), validation (the schedule in robfig/cron's
grammar with its error text, an IANA time zone, the concurrency policy, the job template whose selector
is always generated, names of at most 52 characters so `<name>-<minutes>` fits) and kubectl's columns;
the controller manager's cronjob loop creates its Jobs."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.errors import FieldError, invalid, not_supported, required
from controlplane.apiserver.kinds import jobspec, podspec
from controlplane.apiserver.kinds.base import REFUSE_BATCH, Kind, SelectableField, StatusSubresource
from controlplane.apiserver.kinds.cronschedule import ScheduleError, parse_standard, time_zone_error
from controlplane.apiserver.meta import age
from controlplane.apiserver.tables import since
from controlplane.apiserver.validation import nonnegative

Obj = dict[str, Any]

POLICIES = ["Allow", "Forbid", "Replace"]
MAX_NAME = 52  # DNS-1035 label length less 11: room for "-<scheduled time in minutes>"


def validate_schedule(schedule: Any, zone: Any, allow_tz: bool) -> list[FieldError]:
    path = "spec.schedule"
    if not schedule:
        return [required(path)]
    errors: list[FieldError] = []
    try:
        parse_standard(schedule)
    except ScheduleError as err:
        errors.append(invalid(path, schedule, str(err)))
    if allow_tz and "TZ" in schedule and zone is not None:
        errors.append(invalid(path, schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
    elif not allow_tz and "TZ" in schedule:
        errors.append(
            invalid(path, schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
        )
    return errors


def validate_cronjob_spec(spec: Any, old: Obj | None) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required("spec")]
    allow_tz = old is not None and "TZ" in (old.get("schedule") or "")
    errors = validate_schedule(spec.get("schedule"), spec.get("timeZone"), allow_tz)
    errors += nonnegative("spec.startingDeadlineSeconds", spec.get("startingDeadlineSeconds"))
    zone = spec.get("timeZone")
    if zone is not None and (old is None or old.get("timeZone") != zone):
        detail = time_zone_error(zone)
        if detail:
            errors.append(invalid("spec.timeZone", zone, detail))
    policy = spec.get("concurrencyPolicy")
    if not policy:
        errors.append(required("spec.concurrencyPolicy"))
    elif policy not in POLICIES:
        errors.append(not_supported("spec.concurrencyPolicy", policy, POLICIES))
    template = spec.get("jobTemplate")
    errors += jobspec.validate_template_of_cronjob(
        (template or {}).get("spec") if isinstance(template, dict) else None, "spec.jobTemplate.spec"
    )
    for name in ("successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        errors += nonnegative(f"spec.{name}", spec.get(name))
    return errors


class CronJob(Kind):
    group = "batch"
    kind = "CronJob"
    plural = "cronjobs"
    short_names = ("cj",)
    categories = ("all",)
    schema = "V1CronJob"
    # batch/v1's label conversion accepts Job's status.successful for CronJobs too; nothing exposes it
    field_selectors = (SelectableField("status.successful", exposed=False),)
    field_refusal = REFUSE_BATCH
    type_marks = jobspec.TYPE_MARKS
    generation = True
    subresources = (StatusSubresource("CronJob", "batch"),)
    columns = (
        tables.NAME,
        tables.column("Schedule", desc="The schedule in Cron format."),
        tables.column("Timezone", desc="The time zone name for the given schedule."),
        tables.column(
            "Suspend", kind="boolean", desc="This flag tells the controller to suspend subsequent executions."
        ),
        tables.column("Active", kind="integer", desc="A list of pointers to currently running jobs."),
        tables.column(
            "Last Schedule", desc="Information when was the last time the job was successfully scheduled."
        ),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column("Selector", 1, desc="A label query over pods that should match the pod count."),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        if not spec.get("concurrencyPolicy"):
            spec["concurrencyPolicy"] = "Allow"
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        template = spec.get("jobTemplate")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            podspec.default_template(template["spec"])

    def prepare_for_create(self, obj: Obj) -> None:
        obj.pop("status", None)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return validate_cronjob_spec(obj.get("spec"), None) + self._name(obj)

    def _name(self, obj: Obj) -> list[FieldError]:
        name = (obj.get("metadata") or {}).get("name") or ""
        return (
            [invalid("metadata.name", name, f"must be no more than {MAX_NAME} characters")]
            if len(name) > MAX_NAME
            else []
        )

    def validate_update(self, new: Obj, old: Obj, subresource: str) -> list[FieldError]:
        if subresource:
            return []
        # validate() already judged the spec as new; an update keeps a TZ its schedule already had.
        return []

    def cells(self, obj: Obj) -> list[Any]:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        names, images = tables.containers_images((job_spec.get("template") or {}).get("spec") or {})
        suspend = spec.get("suspend")
        last = since(status["lastScheduleTime"]) if status.get("lastScheduleTime") else "<none>"
        return [
            obj["metadata"].get("name"),
            spec.get("schedule", ""),
            spec.get("timeZone") or "<none>",
            "<unset>" if suspend is None else ("True" if suspend else "False"),
            len(status.get("active") or []),
            last,
            age(obj),
            names,
            images,
            tables.format_selector(job_spec.get("selector")),
        ]


KIND = CronJob()
