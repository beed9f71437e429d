"""The TTL-after-finished controller (upstream's pkg/controller/ttlafterfinished): a finished Job with
`ttlSecondsAfterFinished` is deleted that many seconds after it finished (its Complete or Failed
condition's lastTransitionTime), with foreground propagation so its pods go first.

Before deleting, the Job is read again from the API (never the cache): a Job whose TTL was raised or
removed since, or that was replaced under the same name, stays; the DELETE carries the read's UID and
resourceVersion as preconditions, so a change in between wins.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.job.controller import job_path
from kubeclient.errors import ApiError
from kubeclient.informer import by_namespace, split_key

Obj = dict[str, Any]


def finish_time(job: Obj) -> datetime | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return podutil.parse_time(c.get("lastTransitionTime"))
    return None


def expires_at(job: Obj) -> datetime | None:
    """When the Job is due for deletion, None if never (no TTL, not finished, already being deleted)."""
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if ttl is None or (job.get("metadata") or {}).get("deletionTimestamp"):
        return None
    finished = finish_time(job)
    return finished + timedelta(seconds=int(ttl)) if finished is not None else None


class TTLAfterFinishedController(Controller):
    name = "ttl-after-finished"
    account = "ttl-after-finished-controller"

    def __init__(self, ctx: ControllerContext, clock: Callable[[], datetime] = podutil.now) -> None:
        super().__init__(ctx)
        self.clock = clock
        self.jobs = ctx.informers.get("/apis/batch/v1/jobs", indexers={"namespace": by_namespace})
        self.jobs.add_handler(on_add=self._job_changed, on_update=lambda _o, n: self._job_changed(n))

    def _job_changed(self, job: Obj) -> None:
        if expires_at(job) is not None:
            self.enqueue(job)

    async def sync(self, key: str) -> None:
        cached = self.jobs.get(key)
        if cached is None or expires_at(cached) is None:
            return
        if self._wait(key, cached):
            return
        namespace, name = split_key(key)
        try:
            fresh = await self.client.get(job_path(namespace, name))
        except ApiError as err:
            if err.not_found:
                return
            raise
        if expires_at(fresh) is None or self._wait(key, fresh):
            return
        meta = fresh["metadata"]
        try:
            await self.client.delete(
                job_path(namespace, name),
                {
                    "propagationPolicy": "Foreground",
                    "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
                },
            )
        except ApiError as err:
            if not err.not_found:
                raise

    def _wait(self, key: str, job: Obj) -> bool:
        """Requeue for when the Job expires; True if that is still to come."""
        due = expires_at(job)
        assert due is not None
        left = (due - self.clock()).total_seconds()
        if left > 0:
            self.queue.add_after(key, left + 0.05)
            return True
        return False
