"""The Job controller (upstream's pkg/controller/job/job_controller.go, 1.32): run a Job's pods to
completion and report it.

One sync reads the Job from the cache, claims its pods, counts the finished ones through
uncountedTerminatedPods and the tracking finalizer (`logic.tally`), then takes the step that applies:
a finished Job only has finalizers left to remove; a suspended Job loses its running pods (Suspended);
a Job past its backoffLimit or activeDeadlineSeconds gets FailureTarget and loses its running pods; a
Job that met its completions gets SuccessCriteriaMet and loses the rest; otherwise pods are created up
to parallelism (Indexed Jobs by their lowest missing index), after upstream's pod-failure backoff (10 s
doubling per failure since the last success, at most 10 minutes). Once no pod is left running or
uncounted, the target condition becomes Failed or Complete (with completionTime) and an event says so.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.expectations import Expectations
from controlplane.controllers.job import logic
from controlplane.controllers.job import pods as jp
from controlplane.controllers.podcontrol import PodControl
from controlplane.controllers.refmanager import RefManager, pod_path, recheck
from kubeclient.client import STRATEGIC_PATCH
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, key_of, meta, split_key
from kubeclient.selectors import SelectorError, from_label_selector

log = logging.getLogger("controlplane.controllers.job")

Obj = dict[str, Any]
KIND, API_VERSION = "Job", "batch/v1"
BURST = 500


def job_path(namespace: str, name: str) -> str:
    return f"/apis/batch/v1/namespaces/{quote(namespace)}/jobs/{quote(name)}"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class JobController(Controller):
    name = "job"

    def __init__(self, ctx: ControllerContext, clock: Any = podutil.now) -> None:
        super().__init__(ctx)
        self.clock = clock
        self.jobs = ctx.informers.get("/apis/batch/v1/jobs", indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get(
            "/api/v1/pods", indexers={"namespace": by_namespace, "controller": by_controller_uid}
        )
        self.recorder = ctx.recorder("job-controller")
        self.pod_control = PodControl(self.client, self.recorder)
        self.expectations = Expectations()
        self.removed: dict[str, set[str]] = {}  # job key -> pod UIDs whose finalizer we removed, not yet seen
        self.backoff: dict[str, logic.BackoffRecord] = {}
        self.jobs.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.pods.add_handler(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )

    # --- pod events ----------------------------------------------------------------------------------

    def _job_key(self, pod: Obj) -> str | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != KIND or not ref.get("apiVersion", "").startswith("batch/"):
            return None
        return f"{meta(pod).get('namespace', '')}/{ref.get('name', '')}"

    def _owned(self, pod: Obj) -> str | None:
        key = self._job_key(pod)
        if key is None:
            return None
        job = self.jobs.get(key)
        if job is None or meta(job).get("uid") != (controller_ref(pod) or {}).get("uid"):
            # Its Job is gone: a sync of the key releases the pod's finalizer.
            return key if jp.has_finalizer(pod) else None
        return key

    def _pod_added(self, pod: Obj) -> None:
        key = self._owned(pod)
        if key is None:
            return
        if jp.deleting(pod):
            self.expectations.deletion_observed(key, key_of(pod))
        else:
            self.expectations.creation_observed(key)
        self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        key = self._owned(new) or self._owned(old)
        if key is None:
            return
        if jp.deleting(new) and not jp.deleting(old):
            self.expectations.deletion_observed(key, key_of(new))
        if not jp.has_finalizer(new):
            self.removed.get(key, set()).discard(meta(new).get("uid", ""))
        self.queue.add(key)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._job_key(pod)
        if key is None:
            return
        self.expectations.deletion_observed(key, key_of(pod))
        self.removed.get(key, set()).discard(meta(pod).get("uid", ""))
        self.queue.add(key)

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.jobs.get(key)
        if cached is None:
            self.expectations.delete(key)
            self.backoff.pop(key, None)
            self.removed.pop(key, None)
            await self._release_orphans(key)
            return
        job = copy.deepcopy(cached)
        job.setdefault("apiVersion", API_VERSION)
        job.setdefault("kind", KIND)
        namespace, name = split_key(key)
        try:
            selector = from_label_selector((job.get("spec") or {}).get("selector"))
        except SelectorError as err:
            self.recorder.event(job, WARNING, "SelectorParsingFailed", str(err))
            return
        manager = RefManager(
            self.client, job, selector, recheck(self.client, job_path(namespace, name), meta(job)["uid"])
        )
        pods = await manager.claim(self.pods.by_index("namespace", namespace))
        self._forget_seen_removals(key, pods)
        spec = logic.JobSpec.of(job)
        now = self.clock()
        pending = self.removed.setdefault(key, set())
        tally = logic.tally(job, pods, spec, pending, now)
        record = self.backoff.setdefault(key, logic.BackoffRecord())
        record.update(tally, now)
        status = copy.deepcopy(job.get("status") or {})
        deleted = 0
        if not logic.finished(job):
            deleted = await self._step(key, job, spec, tally, status, now, record)
        self._fill_counts(status, spec, tally, deleted)
        job = await self._write_status(job, status)
        job = await self._flush(key, job, tally, pods)
        if not logic.finished(job):
            await self._finish(job, tally, deleted, now)
        self._requeue(key, job, spec, tally, now, record)

    def _forget_seen_removals(self, key: str, pods: list[Obj]) -> None:
        """Forget removals the cache has since shown (a pod no longer carrying the finalizer, or gone)."""
        pending = self.removed.get(key)
        if not pending:
            return
        live = {meta(p)["uid"] for p in pods if jp.has_finalizer(p)}
        pending.intersection_update(live)

    async def _step(
        self,
        key: str,
        job: Obj,
        spec: logic.JobSpec,
        t: logic.Tally,
        status: Obj,
        now: datetime,
        record: logic.BackoffRecord,
    ) -> int:
        """Suspension, failure, success or pod management; the number of pods this step deleted."""
        now_s = stamp(now)
        suspended = logic.condition(job, logic.SUSPENDED)
        if spec.suspend:
            if logic.set_condition(status, logic.SUSPENDED, "True", "JobSuspended", "Job suspended", now_s):
                self.recorder.event(job, NORMAL, "Suspended", "Job suspended")
            return await self._delete(key, job, t.active)
        if suspended is not None and suspended.get("status") == "True":
            logic.set_condition(status, logic.SUSPENDED, "False", "JobResumed", "Job resumed", now_s)
            self.recorder.event(job, NORMAL, "Resumed", "Job resumed")
            status["startTime"] = now_s
        status.setdefault("startTime", now_s)
        probe = {**job, "status": status}
        why = logic.failure(probe, spec, t, now)
        if why is not None:
            logic.set_condition(status, logic.FAILURE_TARGET, "True", why[0], why[1], now_s)
            return await self._delete(key, job, t.active)
        met = (
            None
            if logic.has(job, logic.SUCCESS_CRITERIA_MET)
            else (
                logic.success_policy(job, spec, t)
                or (logic.COMPLETIONS_REACHED if logic.succeeded(spec, t) else None)
            )
        )
        if met is not None:
            logic.set_condition(status, logic.SUCCESS_CRITERIA_MET, "True", *met, now_s)
        if met is not None or logic.has(job, logic.SUCCESS_CRITERIA_MET):
            return await self._delete(key, job, t.active)
        if not self.expectations.satisfied(key):
            return 0
        wanted = logic.wanted_active(spec, t)
        excess = logic.excess_active(spec, t, wanted)
        if excess:
            return await self._delete(key, job, excess)
        missing = min(logic.missing_active(job, t, wanted), BURST)
        per_index = spec.per_index_limit is not None
        if missing > 0 and (per_index or record.remaining(now) == 0):
            indexes: list[int | None] = (
                list(logic.indexes_to_start(job, spec, t, missing, now)) if spec.indexed else [None] * missing
            )
            await self._create(key, job, indexes, t if per_index else None)
        return 0

    async def _create(
        self, key: str, job: Obj, indexes: list[int | None], t: logic.Tally | None = None
    ) -> None:
        if not indexes:
            return
        self.expectations.expect_creations(key, len(indexes))

        def failures(index: int | None) -> int | None:
            return None if t is None or index is None else t.index_failures.counts.get(index, 0)

        results = await asyncio.gather(
            *(self.pod_control.create(job, jp.pod_for(job, i, failures(i))) for i in indexes),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        self.expectations.lower(key, adds=len(errors))
        if errors:
            first = errors[0]
            if isinstance(first, ApiError) and first.forbidden and "being terminated" in first.message:
                return
            raise first

    async def _delete(self, key: str, job: Obj, victims: list[Obj]) -> int:
        if not victims:
            return 0
        self.expectations.expect_deletions(key, [key_of(p) for p in victims])
        results = await asyncio.gather(
            *(self.pod_control.delete(job, p) for p in victims), return_exceptions=True
        )
        gone = 0
        for pod, result in zip(victims, results, strict=True):
            if isinstance(result, BaseException):
                self.expectations.deletion_observed(key, key_of(pod))
                if not (isinstance(result, ApiError) and result.not_found):
                    raise result
            gone += 1
        return gone

    def _fill_counts(self, status: Obj, spec: logic.JobSpec, t: logic.Tally, deleted: int) -> None:
        status["active"] = max(0, len(t.active) - deleted)
        status["ready"] = sum(1 for p in t.active if podutil.is_ready(p))
        status["terminating"] = t.terminating + deleted
        status["uncountedTerminatedPods"] = {
            k: v for k, v in (("succeeded", t.uncounted_succeeded), ("failed", t.uncounted_failed)) if v
        }
        if t.completed_indexes or "completedIndexes" in status:
            status["completedIndexes"] = logic.format_intervals(t.completed_indexes)
        if spec.per_index_limit is not None:
            status["failedIndexes"] = logic.format_intervals(t.failed_indexes)
        for name in ("active", "succeeded", "failed"):
            if not status.get(name):
                status.pop(name, None)

    async def _flush(self, key: str, job: Obj, t: logic.Tally, pods: list[Obj]) -> Obj:
        """Remove the finalizers of the pods now recorded, then move their UIDs into the counters."""
        released = await self._release(key, t.release)
        present = {meta(p)["uid"]: p for p in pods}
        status = copy.deepcopy(job.get("status") or {})
        uncounted = status.get("uncountedTerminatedPods") or {}
        moved = False
        for bucket in ("succeeded", "failed"):
            keep = []
            for uid in uncounted.get(bucket) or []:
                pod = present.get(uid)
                if pod is None or uid in released or not jp.has_finalizer(pod):
                    status[bucket] = int(status.get(bucket) or 0) + 1
                    moved = True
                else:
                    keep.append(uid)
            if keep:
                uncounted[bucket] = keep
            else:
                uncounted.pop(bucket, None)
        if not moved:
            return job
        status["uncountedTerminatedPods"] = uncounted
        return await self._write_status(job, status)

    async def _release(self, key: str, pods: list[Obj]) -> set[str]:
        done: set[str] = set()
        pending = self.removed.setdefault(key, set())

        async def one(pod: Obj) -> None:
            # upstream's removeTrackingFinalizerPatch: only that finalizer goes, whatever else changed.
            patch = {
                "metadata": {
                    "uid": meta(pod)["uid"],
                    "$deleteFromPrimitiveList/finalizers": [jp.TRACKING_FINALIZER],
                }
            }
            try:
                await self.client.patch(pod_path(pod), patch, content_type=STRATEGIC_PATCH)
            except ApiError as err:
                if not err.not_found:
                    raise
            done.add(meta(pod)["uid"])
            pending.add(meta(pod)["uid"])

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]
        return done

    async def _finish(self, job: Obj, t: logic.Tally, deleted: int, now: datetime) -> None:
        """FailureTarget -> Failed, SuccessCriteriaMet -> Complete, once nothing runs or waits to be counted."""
        status = copy.deepcopy(job.get("status") or {})
        if status.get("active") or status.get("terminating") or status.get("uncountedTerminatedPods"):
            return
        now_s = stamp(now)
        target = logic.condition(job, logic.FAILURE_TARGET)
        if target is not None and target.get("status") == "True":
            reason, message = target.get("reason", ""), target.get("message", "")
            logic.set_condition(status, logic.FAILED, "True", reason, message, now_s)
            await self._write_status(job, status)
            self.recorder.event(job, WARNING, reason, message)
        elif logic.has(job, logic.SUCCESS_CRITERIA_MET):
            met = logic.condition(job, logic.SUCCESS_CRITERIA_MET) or {}
            logic.set_condition(
                status,
                logic.COMPLETE,
                "True",
                met.get("reason", logic.COMPLETIONS_REACHED[0]),
                met.get("message", logic.COMPLETIONS_REACHED[1]),
                now_s,
            )
            status["completionTime"] = now_s
            await self._write_status(job, status)
            self.recorder.event(job, NORMAL, "Completed", "Job completed")

    async def _write_status(self, job: Obj, status: Obj) -> Obj:
        """PUT the status with the Job's resourceVersion: a stale Job is refused (409) and the sync runs
        again from the fresh one, so counts never move twice."""
        if status == (job.get("status") or {}):
            return job
        namespace, name = meta(job)["namespace"], meta(job)["name"]
        body = {**job, "status": status}
        try:
            written = await self.client.replace(job_path(namespace, name) + "/status", body)
        except ApiError as err:
            if err.not_found:
                return job
            raise
        written.setdefault("apiVersion", API_VERSION)
        written.setdefault("kind", KIND)
        return written

    def _requeue(
        self,
        key: str,
        job: Obj,
        spec: logic.JobSpec,
        tally: logic.Tally,
        now: datetime,
        record: logic.BackoffRecord,
    ) -> None:
        if logic.finished(job):
            return
        waits = [
            0.0 if spec.per_index_limit is not None else record.remaining(now),
            *logic.index_waits(spec, tally, now),
        ]
        left = logic.deadline_left(job, spec, now)
        if left is not None:
            waits.append(left)
        positive = [w for w in waits if w > 0]
        if positive:
            self.queue.add_after(key, min(positive) + 0.05)

    async def _release_orphans(self, key: str) -> None:
        """Pods with the finalizer whose Job is gone: nothing will count them any more."""
        namespace, name = split_key(key)
        orphans = [
            p
            for p in self.pods.by_index("namespace", namespace)
            if jp.has_finalizer(p)
            and (controller_ref(p) or {}).get("kind") == KIND
            and (controller_ref(p) or {}).get("name") == name
        ]
        if orphans:
            await self._release(key, orphans)
            self.removed.pop(key, None)
