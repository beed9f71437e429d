"""The CronJob controller (upstream's cronjob_controllerv2.go, 1.32): create a CronJob's Job each time its
schedule comes due, and keep its status and history.

One sync, as upstream's syncCronJob: bring status.active up to date from the CronJob's Jobs (finished
ones leave it: SawCompletedJob; one that vanished: MissingJob; an unfinished one it never listed:
UnexpectedJob) and lastSuccessfulTime; then, unless the CronJob is suspended or being deleted, find the
most recent time due (TooManyMissedTimes when more than 100 were missed, still starting the latest);
too late for startingDeadlineSeconds (MissSchedule), already started, or Forbid with a Job running
(JobAlreadyActive): nothing; Replace deletes the running ones first; then the Job
`<name>-<minutes>` with the scheduled-timestamp annotation (SuccessfulCreate), lastScheduleTime, and
a wake-up for the next time. Finished Jobs beyond the history limits go, oldest first.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.cronjob import schedule as cs
from controlplane.controllers.podcontrol import controller_ref as owner_reference
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, meta

log = logging.getLogger("controlplane.controllers.cronjob")

Obj = dict[str, Any]
KIND, API_VERSION = "CronJob", "batch/v1"


def cronjob_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{quote(namespace)}/cronjobs/{quote(name)}"


def jobs_path(namespace: str, name: str = "") -> str:
    base = f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs"
    return f"{base}/{quote(name)}" if name else base


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def finished_condition(job: Obj) -> str | None:
    """Complete or Failed, whichever is True (getFinishedStatus)."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def job_from_template(cj: Obj, scheduled: datetime, sched: cs.Schedule) -> Obj:
    """getJobFromTemplate2: the template's labels and annotations, the scheduled-timestamp annotation,
    owned by the CronJob."""
    template = (cj.get("spec") or {}).get("jobTemplate") or {}
    tmeta = template.get("metadata") or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[cs.SCHEDULED_TIMESTAMP] = cs.scheduled_stamp(scheduled, sched)
    job_meta: Obj = {
        "name": cs.job_name(cj, scheduled),
        "namespace": cj["metadata"]["namespace"],
        "annotations": annotations,
        "ownerReferences": [owner_reference(cj)],
    }
    if tmeta.get("labels"):
        job_meta["labels"] = dict(tmeta["labels"])
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": job_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def job_reference(job: Obj) -> Obj:
    m = job["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "name": m["name"],
        "namespace": m["namespace"],
        "uid": m["uid"],
        "resourceVersion": m.get("resourceVersion", ""),
    }


def history_to_delete(jobs: list[Obj], limit: int | None) -> list[Obj]:
    """The oldest finished Jobs beyond `limit` (by startTime, those without one first, then by name)."""
    if limit is None or len(jobs) <= limit:
        return []
    ordered = sorted(
        jobs, key=lambda j: ((j.get("status") or {}).get("startTime") or "", j["metadata"]["name"])
    )
    return ordered[: len(jobs) - limit]


class CronJobController(Controller):
    name = "cronjob"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.clock: Callable[[], datetime] = ctx.option("cronjob_clock", podutil.now)
        self.cronjobs = ctx.informers.get("/apis/batch/v1/cronjobs", indexers={"namespace": by_namespace})
        self.jobs = ctx.informers.get(
            "/apis/batch/v1/jobs", indexers={"namespace": by_namespace, "controller": by_controller_uid}
        )
        self.recorder = ctx.recorder("cronjob-controller")
        self.cronjobs.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.jobs.add_handler(
            on_add=self._job_changed,
            on_update=lambda _o, n: self._job_changed(n),
            on_delete=self._job_changed,
        )

    def _job_changed(self, job: Obj) -> None:
        ref = controller_ref(job)
        if ref is not None and ref.get("kind") == KIND:
            self.queue.add(f"{meta(job).get('namespace', '')}/{ref.get('name', '')}")

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.cronjobs.get(key)
        if cached is None:
            return
        cj = copy.deepcopy(cached)
        cj.setdefault("apiVersion", API_VERSION)
        cj.setdefault("kind", KIND)
        uid = meta(cj)["uid"]
        children = list(self.jobs.by_index("controller", uid))
        status = cj.setdefault("status", {})
        before = copy.deepcopy(status)
        await self._track_active(cj, children)
        delay = None
        if not meta(cj).get("deletionTimestamp"):
            delay = await self._schedule(cj)
        if status != before:
            await self._write_status(cj)
        await self._clean_history(cj, children)
        if delay is not None:
            self.queue.add_after(key, max(delay, 0.0))

    async def _track_active(self, cj: Obj, children: list[Obj]) -> None:
        status = cj["status"]
        active = status.get("active") or []
        listed = {a.get("uid") for a in active}
        for job in children:
            juid = meta(job)["uid"]
            done = finished_condition(job)
            if juid not in listed and done is None:
                fresh = await self._fresh_active(cj)
                if juid in {a.get("uid") for a in fresh}:
                    active, listed = (
                        fresh,
                        {a.get("uid") for a in fresh},
                    )  # our cache was behind our own write
                    continue
                self.recorder.event(
                    cj,
                    WARNING,
                    "UnexpectedJob",
                    f"Saw a job that the controller did not create or forgot: {meta(job)['name']}",
                )
            elif juid in listed and done is not None:
                active = [a for a in active if a.get("uid") != juid]
                self.recorder.event(
                    cj,
                    NORMAL,
                    "SawCompletedJob",
                    f"Saw completed job: {meta(job)['name']}, condition: {done}",
                )
            if done == "Complete":
                completed = podutil.parse_time((job.get("status") or {}).get("completionTime"))
                last = podutil.parse_time(status.get("lastSuccessfulTime"))
                if completed is not None and (last is None or completed > last):
                    status["lastSuccessfulTime"] = job["status"]["completionTime"]
        present = {meta(j)["uid"] for j in children}
        for ref in list(active):
            if ref.get("uid") in present:
                continue
            try:
                found = await self.client.get(jobs_path(meta(cj)["namespace"], ref.get("name", "")))
            except ApiError as err:
                if not err.not_found:
                    raise
                found = None
            if found is None or meta(found).get("uid") != ref.get("uid"):
                self.recorder.event(cj, NORMAL, "MissingJob", f"Active job went missing: {ref.get('name')}")
                active = [a for a in active if a.get("uid") != ref.get("uid")]
        if active:
            status["active"] = active
        else:
            status.pop("active", None)

    async def _fresh_active(self, cj: Obj) -> list[Obj]:
        """status.active as the API has it now (upstream re-reads the CronJob before calling a Job unexpected)."""
        try:
            fresh = await self.client.get(cronjob_path(meta(cj)["namespace"], meta(cj)["name"]))
        except ApiError as err:
            if err.not_found:
                return []
            raise
        if meta(fresh).get("uid") != meta(cj)["uid"]:
            return []
        cj["metadata"]["resourceVersion"] = meta(fresh).get("resourceVersion")
        cj["status"].update({k: v for k, v in (fresh.get("status") or {}).items() if k != "active"})
        return list((fresh.get("status") or {}).get("active") or [])

    async def _schedule(self, cj: Obj) -> float | None:
        """Start the Job due now, if any; the seconds until the next time is due (None: never)."""
        spec, status = cj.get("spec") or {}, cj["status"]
        try:
            sched = cs.Schedule.parse(spec.get("schedule", ""), spec.get("timeZone"))
        except cs.ScheduleError as err:
            if spec.get("timeZone") and "time zone" in str(err):
                self.recorder.event(
                    cj, WARNING, "UnknownTimeZone", f"invalid timeZone: {spec['timeZone']!r}: {err}"
                )
            else:
                self.recorder.event(
                    cj,
                    WARNING,
                    "UnparseableSchedule",
                    f"unparseable schedule: {spec.get('schedule')!r} : {err}",
                )
            return None
        if spec.get("suspend"):
            return None
        now = self.clock()
        try:
            _, scheduled, missed = cs.most_recent(cj, now, sched)
        except cs.ScheduleError as err:
            self.recorder.event(
                cj, WARNING, "InvalidSchedule", f"invalid schedule: {spec.get('schedule')} : {err}"
            )
            return None
        if scheduled is not None and missed > cs.TOO_MANY_MISSED:
            self.recorder.event(
                cj,
                WARNING,
                "TooManyMissedTimes",
                f"too many missed start times: {missed}. Set or decrease .spec.startingDeadlineSeconds "
                "or check clock skew",
            )
        if scheduled is None or scheduled > now:
            return cs.next_delay(cj, now, sched)
        sds = spec.get("startingDeadlineSeconds")
        if sds is not None and (now - scheduled).total_seconds() > int(sds):
            self.recorder.event(
                cj, WARNING, "MissSchedule", f"Missed scheduled time to start a job: {cs.rfc1123z(scheduled)}"
            )
            return cs.next_delay(cj, now, sched)
        name = cs.job_name(cj, scheduled)
        last = podutil.parse_time(status.get("lastScheduleTime"))
        if any(a.get("name") == name for a in status.get("active") or []) or last == scheduled:
            return cs.next_delay(cj, now, sched)
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and status.get("active"):
            self.recorder.event(
                cj,
                NORMAL,
                "JobAlreadyActive",
                "Not starting job because prior execution is running and concurrency policy is Forbid",
            )
            return cs.next_delay(cj, now, sched)
        if policy == "Replace":
            await self._replace_active(cj)
        await self._create_job(cj, scheduled, sched)
        return cs.next_delay(cj, now, sched)

    async def _replace_active(self, cj: Obj) -> None:
        status = cj["status"]
        for ref in list(status.get("active") or []):
            try:
                await self.client.delete(
                    jobs_path(ref.get("namespace", ""), ref.get("name", "")),
                    {"propagationPolicy": "Background", "preconditions": {"uid": ref.get("uid")}},
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    self.recorder.event(cj, WARNING, "FailedDelete", f"Deleted job: {err.message or err}")
                    raise
            self.recorder.event(cj, NORMAL, "SuccessfulDelete", f"Deleted job {ref.get('name')}")
            status["active"] = [a for a in status.get("active") or [] if a.get("uid") != ref.get("uid")]
        if not status.get("active"):
            status.pop("active", None)

    async def _create_job(self, cj: Obj, scheduled: datetime, sched: cs.Schedule) -> None:
        status = cj["status"]
        body = job_from_template(cj, scheduled, sched)
        namespace = meta(cj)["namespace"]
        try:
            job = await self.client.create(jobs_path(namespace), body)
        except ApiError as err:
            if err.already_exists:
                # Made before a crash or by a stale cache: ours if it names us, then it is listed.
                job = await self.client.get(jobs_path(namespace, body["metadata"]["name"]))
                if (controller_ref(job) or {}).get("uid") != meta(cj)["uid"]:
                    return
            else:
                if not (err.forbidden and "being terminated" in err.message):
                    self.recorder.event(
                        cj, WARNING, "FailedCreate", f"Error creating job: {err.message or err}"
                    )
                raise
        else:
            self.recorder.event(cj, NORMAL, "SuccessfulCreate", f"Created job {meta(job)['name']}")
        if not any(a.get("uid") == meta(job)["uid"] for a in status.get("active") or []):
            status.setdefault("active", []).append(job_reference(job))
        status["lastScheduleTime"] = stamp(scheduled)

    async def _write_status(self, cj: Obj) -> None:
        """Write the status this sync computed. A conflict means our cached copy was behind an earlier
        status write of ours (this controller is the status's only writer): the status computed here
        already accounts for what that write did, and it may name a Job this sync just created, so it is
        written over the current object rather than dropped. Dropping it and retrying the sync would
        find that Job missing from status.active and call it unexpected."""
        namespace, name = meta(cj)["namespace"], meta(cj)["name"]
        path = cronjob_path(namespace, name) + "/status"
        for _ in range(3):
            try:
                await self.client.replace(path, cj)
                return
            except ApiError as err:
                if err.not_found:
                    return
                if not err.conflict:
                    raise
            try:
                fresh = await self.client.get(cronjob_path(namespace, name))
            except ApiError as err:
                if err.not_found:
                    return
                raise
            if meta(fresh).get("uid") != meta(cj)["uid"]:
                return
            cj = {**fresh, "status": cj["status"]}
        await self.client.replace(path, cj)

    async def _clean_history(self, cj: Obj, children: list[Obj]) -> None:
        """cleanupFinishedJobs: keep successfulJobsHistoryLimit Complete and failedJobsHistoryLimit Failed."""
        spec = cj.get("spec") or {}
        succeeded = [
            j
            for j in children
            if finished_condition(j) == "Complete" and not meta(j).get("deletionTimestamp")
        ]
        failed = [
            j for j in children if finished_condition(j) == "Failed" and not meta(j).get("deletionTimestamp")
        ]
        doomed = history_to_delete(succeeded, spec.get("successfulJobsHistoryLimit")) + history_to_delete(
            failed, spec.get("failedJobsHistoryLimit")
        )
        for job in doomed:
            try:
                await self.client.delete(
                    jobs_path(meta(job)["namespace"], meta(job)["name"]),
                    {"propagationPolicy": "Background", "preconditions": {"uid": meta(job)["uid"]}},
                )
            except ApiError as err:
                if err.not_found or err.conflict:
                    continue
                self.recorder.event(cj, WARNING, "FailedDelete", f"Deleted job: {err.message or err}")
                raise
            self.recorder.event(cj, NORMAL, "SuccessfulDelete", f"Deleted job {meta(job)['name']}")
