"""The status of a rollout in progress and the Progressing condition (upstream's progress.go).

A rollout reports progress whenever more pods are updated, ready or available, or fewer old ones
remain; each report moves the Progressing condition's lastUpdateTime. When nothing moved for
progressDeadlineSeconds the condition turns False with ProgressDeadlineExceeded (`kubectl rollout
status` then exits non-zero); once every replica is updated and available it says
NewReplicaSetAvailable. A status that did not change is not written; instead, a Deployment that may run
out of time is looked at again when its deadline passes, since nothing else would wake it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers.deployment import conditions as cond
from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext, significant
from controlplane.controllers.deployment.sync import calculate_status
from controlplane.controllers.deployment.util import meta, status
from controlplane.controllers.podutil import parse_time

Obj = dict[str, Any]


def replica_failures(all_rss: list[Obj | None], new: Obj | None) -> list[Obj]:
    """ReplicaFailure conditions of the new ReplicaSet, else of any other (getReplicaFailures)."""

    def failures(rs: Obj | None) -> list[Obj]:
        return [
            cond.from_replica_set(c)
            for c in status(rs).get("conditions") or []
            if c.get("type") == cond.REPLICA_FAILURE
        ]

    found = failures(new)
    if found:
        return found
    return [c for rs in all_rss if rs is not None for c in failures(rs)]


def rollout_status(d: Obj, all_rss: list[Obj | None], new: Obj | None, now: datetime) -> Obj:
    """syncRolloutStatus's new status: the counts, Available, Progressing and ReplicaFailure."""
    st = calculate_status(all_rss, new, d, now)
    deadline = util.progress_deadline(d)
    if deadline is None:
        cond.remove_condition(st, cond.PROGRESSING)
    current = cond.get_condition(status(d), cond.PROGRESSING)
    finished = (
        int(st.get("replicas") or 0) == int(st.get("updatedReplicas") or 0)
        and current is not None
        and current.get("reason") == cond.NEW_RS_AVAILABLE
    )
    name = meta(d).get("name", "")
    subject = f'ReplicaSet "{meta(new)["name"]}"' if new is not None else f'Deployment "{name}"'
    if deadline is not None and not finished:
        if util.complete(d, st):
            cond.set_condition(
                st,
                cond.new_condition(
                    cond.PROGRESSING,
                    "True",
                    cond.NEW_RS_AVAILABLE,
                    f"{subject} has successfully progressed.",
                    now,
                ),
            )
        elif util.progressing(d, st):
            # Progress moves lastUpdateTime even when the reason stays (set_condition would not).
            progress = cond.new_condition(
                cond.PROGRESSING, "True", cond.RS_UPDATED, f"{subject} is progressing.", now
            )
            if current is not None:
                if current.get("status") == "True":
                    progress["lastTransitionTime"] = current.get("lastTransitionTime")
                cond.remove_condition(st, cond.PROGRESSING)
            cond.set_condition(st, progress)
        elif util.timed_out(d, st, now):
            cond.set_condition(
                st,
                cond.new_condition(
                    cond.PROGRESSING, "False", cond.TIMED_OUT, f"{subject} has timed out progressing.", now
                ),
            )
    failures = replica_failures(all_rss, new)
    if failures:
        cond.set_condition(st, failures[0])
    else:
        cond.remove_condition(st, cond.REPLICA_FAILURE)
    return st


def recheck_in(d: Obj, new_status: Obj, now: datetime) -> float | None:
    """requeueStuckDeployment: seconds until the deadline may have passed (0: now), None when there is
    nothing to wait for (no deadline, complete, or already timed out)."""
    deadline = util.progress_deadline(d)
    current = cond.get_condition(status(d), cond.PROGRESSING)
    if deadline is None or current is None:
        return None
    if util.complete(d, new_status) or current.get("reason") == cond.TIMED_OUT:
        return None
    since = parse_time(current.get("lastUpdateTime"))
    if since is None:
        return None
    after = (since + timedelta(seconds=deadline) - now).total_seconds()
    return 0.0 if after < 1 else after


async def sync_rollout_status(ctx: SyncContext, all_rss: list[Obj | None], new: Obj | None) -> None:
    now = ctx.now()
    new_status = rollout_status(ctx.d, all_rss, new, now)
    if significant(status(ctx.d)) == significant(new_status):
        after = recheck_in(ctx.d, new_status, now)
        if after == 0.0:
            ctx.enqueue_rate_limited()
        elif after is not None:
            ctx.enqueue_after(after + 1)  # a second more: the deadline has then surely passed
        return
    ctx.d["status"] = new_status
    await ctx.update_status()
