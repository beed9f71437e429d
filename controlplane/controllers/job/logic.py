"""The Job controller's decisions, without I/O (upstream's syncJob arithmetic): which finished pods are
new to count, whether the Job met its success criteria or must fail (backoffLimit, activeDeadlineSeconds),
how many pods (which indexes) to start, the pod-failure backoff, the conditions and the status it shows.

Counting goes through `status.uncountedTerminatedPods`: a finished pod that still carries the tracking
finalizer is recorded there by UID first, its finalizer removed next, and only then moved into
succeeded/failed, so a pod is counted exactly once whatever fails in between (a status write with a stale
resourceVersion is refused, and the sync runs again from the fresh Job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers.job import failurepolicy, perindex
from controlplane.controllers.job import pods as jp
from controlplane.controllers.podutil import is_ready, parse_time
from controlplane.controllers.podutil import now as utcnow

Obj = dict[str, Any]

DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 600.0  # upstream's MaxJobPodFailureBackOff (10 min)
COMPLETE, FAILED = "Complete", "Failed"
SUCCESS_CRITERIA_MET, FAILURE_TARGET, SUSPENDED = "SuccessCriteriaMet", "FailureTarget", "Suspended"
COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Job was active longer than specified deadline")
SUCCESS_POLICY = "SuccessPolicy"


# --- indexes ------------------------------------------------------------------------------------------


def parse_intervals(text: str | None, completions: int) -> set[int]:
    """`1,3-5` -> {1, 3, 4, 5}, dropping what is out of range (parseIndexesFromString)."""
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            continue
        out.update(i for i in range(first, last + 1) if 0 <= i < completions)
    return out


def format_intervals(indexes: set[int]) -> str:
    """{1, 3, 4, 5} -> `1,3-5` (succeededIndexes.String)."""
    parts: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


# --- the job's spec, parsed once ---------------------------------------------------------------------


@dataclass(frozen=True)
class JobSpec:
    completions: int | None
    parallelism: int
    indexed: bool
    backoff_limit: int
    deadline: int | None
    suspend: bool
    on_failure: bool
    per_index_limit: int | None = None  # backoffLimitPerIndex
    max_failed_indexes: int | None = None

    @classmethod
    def of(cls, job: Obj) -> JobSpec:
        spec = job.get("spec") or {}
        template_spec = (spec.get("template") or {}).get("spec") or {}
        completions = spec.get("completions")
        return cls(
            completions=int(completions) if completions is not None else None,
            parallelism=int(spec.get("parallelism") if spec.get("parallelism") is not None else 1),
            indexed=spec.get("completionMode") == "Indexed",
            backoff_limit=int(spec.get("backoffLimit") if spec.get("backoffLimit") is not None else 6),
            deadline=spec.get("activeDeadlineSeconds"),
            suspend=bool(spec.get("suspend")),
            on_failure=template_spec.get("restartPolicy") == "OnFailure",
            per_index_limit=spec.get("backoffLimitPerIndex")
            if spec.get("completionMode") == "Indexed"
            else None,
            max_failed_indexes=spec.get("maxFailedIndexes"),
        )


def condition(job: Obj, kind: str) -> Obj | None:
    return next((c for c in (job.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def has(job: Obj, kind: str) -> bool:
    found = condition(job, kind)
    return bool(found and found.get("status") == "True")


def finished(job: Obj) -> bool:
    return has(job, COMPLETE) or has(job, FAILED)


# --- counting ----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """The pods as the Job counts them in this sync."""

    succeeded: int = 0  # status.succeeded + uncounted + new
    failed: int = 0
    uncounted_succeeded: list[str] = field(default_factory=list)
    uncounted_failed: list[str] = field(default_factory=list)
    completed_indexes: set[int] = field(default_factory=set)
    active: list[Obj] = field(default_factory=list)
    terminating: int = 0
    terminating_indexes: set[int] = field(default_factory=set)
    release: list[Obj] = field(default_factory=list)  # pods whose finalizer goes
    new_failures: list[Obj] = field(default_factory=list)
    new_success: bool = False
    fail_job: str = ""  # a podFailurePolicy FailJob rule's message
    failed_indexes: set[int] = field(default_factory=set)  # backoffLimitPerIndex
    index_failures: perindex.IndexFailures = field(default_factory=perindex.IndexFailures)


def tally(
    job: Obj, pods: list[Obj], spec: JobSpec, pending_removal: set[str], now: datetime | None = None
) -> Tally:
    """Count the Job's pods (upstream's trackJobStatusAndRemoveFinalizers, first half): every pod with the
    finalizer that has finished and is not yet recorded joins uncountedTerminatedPods; every recorded or
    finished pod (and every pod of a finished or deleted Job) loses the finalizer. `pending_removal`:
    UIDs whose finalizer this controller removed and whose pods the cache has not shown since."""
    status = job.get("status") or {}
    uncounted = status.get("uncountedTerminatedPods") or {}
    t = Tally(
        uncounted_succeeded=list(uncounted.get("succeeded") or []),
        uncounted_failed=list(uncounted.get("failed") or []),
    )
    recorded = set(t.uncounted_succeeded) | set(t.uncounted_failed)
    completions = spec.completions or 0
    if spec.indexed:
        t.completed_indexes = parse_intervals(status.get("completedIndexes"), completions)
    ending = finished(job) or bool((job.get("metadata") or {}).get("deletionTimestamp"))
    failed_now: set[int] = set()  # indexes a FailIndex rule failed in this sync
    for pod in pods:
        uid = pod["metadata"]["uid"]
        if jp.is_terminating(pod):
            t.terminating += 1
            if spec.indexed and (index := jp.index_of(pod, completions)) is not None:
                t.terminating_indexes.add(index)
        elif jp.is_active(pod):
            t.active.append(pod)
        if not jp.has_finalizer(pod) or uid in pending_removal:
            continue
        done = jp.is_finished(pod, job)
        if uid in recorded:
            t.release.append(pod)
            continue
        if ending:
            t.release.append(pod)
            continue
        if not done:
            continue
        t.release.append(pod)
        if jp.phase(pod) == "Succeeded":
            index = jp.index_of(pod, completions) if spec.indexed else None
            if spec.indexed and (index is None or index in t.completed_indexes):
                continue  # a duplicate or stray index: released, never counted
            if index is not None:
                t.completed_indexes.add(index)
            t.uncounted_succeeded.append(uid)
            t.new_success = True
        elif spec.suspend and jp.deleting(pod):
            continue  # stopped by suspension: not a failure
        else:
            verdict = failurepolicy.evaluate(job, pod)
            if verdict is not None and verdict.action == failurepolicy.IGNORE:
                continue  # released, neither counted nor backed off
            if verdict is not None and verdict.action == failurepolicy.FAIL_JOB and not t.fail_job:
                t.fail_job = verdict.message
            if verdict is not None and verdict.action == failurepolicy.FAIL_INDEX and spec.indexed:
                index = jp.index_of(pod, completions)
                if index is not None:
                    failed_now.add(index)  # the index fails at once, whatever its backoffLimitPerIndex
            t.uncounted_failed.append(uid)
            t.new_failures.append(pod)
    t.succeeded = int(status.get("succeeded") or 0) + len(t.uncounted_succeeded)
    t.failed = int(status.get("failed") or 0) + len(t.uncounted_failed)
    if spec.per_index_limit is not None:
        t.index_failures = perindex.IndexFailures.of(job, pods, completions, now or utcnow())
        t.failed_indexes = (
            parse_intervals(status.get("failedIndexes"), completions)
            | failed_now
            | t.index_failures.failed(spec.per_index_limit)
        ) - t.completed_indexes
    return t


# --- verdicts ----------------------------------------------------------------------------------------


def failure(job: Obj, spec: JobSpec, t: Tally, now: datetime) -> tuple[str, str] | None:
    """Why the Job fails now, if it does: the backoff limit (failed pods, or container restarts under
    OnFailure), its active deadline, or a FailJob rule of its podFailurePolicy."""
    target = condition(job, FAILURE_TARGET)
    if target is not None and target.get("status") == "True":
        return target.get("reason", ""), target.get("message", "")
    if t.fail_job:
        return failurepolicy.REASON, t.fail_job
    if spec.per_index_limit is not None:
        by_index = perindex.verdict(
            t.failed_indexes, t.completed_indexes, spec.completions or 0, spec.max_failed_indexes
        )
        if by_index is not None:
            return by_index
    if t.failed > spec.backoff_limit or _past_backoff_on_failure(spec, t.active):
        return BACKOFF_LIMIT_EXCEEDED
    if deadline_left(job, spec, now) == 0:
        return DEADLINE_EXCEEDED
    return None


def _past_backoff_on_failure(spec: JobSpec, active: list[Obj]) -> bool:
    if not spec.on_failure:
        return False
    total = sum(jp.restarts(p) for p in active if jp.phase(p) in ("Running", "Pending"))
    return total > 0 if spec.backoff_limit == 0 else total >= spec.backoff_limit


def deadline_left(job: Obj, spec: JobSpec, now: datetime) -> float | None:
    """Seconds until activeDeadlineSeconds runs out (0 when it has), None without a deadline or a start."""
    if spec.deadline is None or spec.suspend:
        return None
    start = parse_time((job.get("status") or {}).get("startTime"))
    if start is None:
        return None
    return max(0.0, spec.deadline - (now - start).total_seconds())


def succeeded(spec: JobSpec, t: Tally) -> bool:
    """The success criteria: every index done, `completions` pods succeeded, or (a work queue without
    completions) one pod succeeded and none is running."""
    if spec.indexed:
        return len(t.completed_indexes) >= (spec.completions or 0)
    if spec.completions is not None:
        return t.succeeded >= spec.completions
    return t.succeeded > 0 and not t.active


def success_policy(job: Obj, spec: JobSpec, t: Tally) -> tuple[str, str] | None:
    """matchSuccessPolicy: the first rule of an Indexed Job's successPolicy its succeeded indexes meet."""
    policy = (job.get("spec") or {}).get("successPolicy")
    if not policy or not spec.indexed or not t.completed_indexes:
        return None
    for index, rule in enumerate(policy.get("rules") or []):
        count = rule.get("succeededCount")
        if rule.get("succeededIndexes") is not None:
            wanted = parse_intervals(rule["succeededIndexes"], spec.completions or 0)
            if not wanted:
                continue
            done = len(wanted & t.completed_indexes)
            if (count is not None and done >= count) or (count is None and done == len(wanted)):
                return SUCCESS_POLICY, f"Matched rules at index {index}"
        elif count is not None and len(t.completed_indexes) >= count:
            return SUCCESS_POLICY, f"Matched rules at index {index}"
    return None


# --- how many to run ---------------------------------------------------------------------------------


def wanted_active(spec: JobSpec, t: Tally) -> int:
    """The pods that should be running (upstream's manageJob): parallelism, capped by what remains."""
    if spec.suspend:
        return 0
    if spec.indexed:
        return max(
            0,
            min(spec.parallelism, (spec.completions or 0) - len(t.completed_indexes) - len(t.failed_indexes)),
        )
    if spec.completions is None:
        return len(t.active) if t.succeeded > 0 else spec.parallelism
    return max(0, min(spec.parallelism, spec.completions - t.succeeded))


def missing_active(job: Obj, t: Tally, wanted: int) -> int:
    """Pods to create (manageJob's diff): the wanted less the active ones, and less the terminating ones
    when only Failed pods are replaced (podReplacementPolicy Failed, the default with a podFailurePolicy)."""
    terminating = t.terminating if jp.only_replace_failed(job) else 0
    return max(0, wanted - terminating - len(t.active))


def indexes_to_start(job: Obj, spec: JobSpec, t: Tally, count: int, now: datetime | None = None) -> list[int]:
    """The lowest indexes neither done, failed, running (nor, when only Failed pods are replaced, still
    terminating) nor backing off (firstPendingIndexes)."""
    running = {jp.index_of(p, spec.completions or 0) for p in t.active}
    if jp.only_replace_failed(job):
        running |= t.terminating_indexes
    out: list[int] = []
    for index in range(spec.completions or 0):
        if len(out) >= count:
            break
        if index in t.completed_indexes or index in running or index in t.failed_indexes:
            continue
        if (
            spec.per_index_limit is not None
            and t.index_failures.wait(index, now or utcnow(), backoff_delay) > 0
        ):
            continue
        out.append(index)
    return out


def index_waits(spec: JobSpec, t: Tally, now: datetime) -> list[float]:
    """Seconds until each backing-off index may run again (backoffLimitPerIndex)."""
    if spec.per_index_limit is None:
        return []
    pending = set(t.index_failures.counts) - t.completed_indexes - t.failed_indexes
    return [w for w in (t.index_failures.wait(i, now, backoff_delay) for i in pending) if w > 0]


def excess_active(spec: JobSpec, t: Tally, wanted: int) -> list[Obj]:
    """Active pods beyond what is wanted (and, for Indexed Jobs, duplicates and finished indexes)."""
    if not spec.indexed:
        extra = len(t.active) - wanted
        return sorted(t.active, key=_newest_first)[:extra] if extra > 0 else []
    seen: set[int] = set()
    out = []
    for pod in sorted(t.active, key=lambda p: p["metadata"].get("creationTimestamp", "")):
        index = jp.index_of(pod, spec.completions or 0)
        if index is None or index in seen or index in t.completed_indexes:
            out.append(pod)
        else:
            seen.add(index)
    keep = [p for p in t.active if p not in out]
    if len(keep) > wanted:
        out += sorted(keep, key=_newest_first)[: len(keep) - wanted]
    return out


def _newest_first(pod: Obj) -> tuple[int, str]:
    # Not-ready, then newest first: the cheapest pods to lose.
    return (
        1 if is_ready(pod) else 0,
        "".join(chr(255 - ord(c)) for c in pod["metadata"].get("creationTimestamp", "")),
    )


# --- pod-failure backoff -----------------------------------------------------------------------------


@dataclass
class BackoffRecord:
    """upstream's backoffRecord: failures since the last success and when the last one happened."""

    failures_after_success: int = 0
    last_failure: datetime | None = None
    counted: set[str] = field(default_factory=set)  # failed pods already in the record (a retried sync)

    def update(self, t: Tally, now: datetime) -> None:
        failures = [p for p in t.new_failures if p["metadata"]["uid"] not in self.counted]
        if t.new_success and not failures:
            self.failures_after_success, self.last_failure = 0, None
            return
        for pod in failures:
            self.counted.add(pod["metadata"]["uid"])
            self.failures_after_success += 1
            when = jp.finish_time(pod, now)
            if self.last_failure is None or when > self.last_failure:
                self.last_failure = when

    def remaining(self, now: datetime) -> float:
        """Seconds to wait before the next pod may be created (0: now)."""
        if self.failures_after_success == 0 or self.last_failure is None:
            return 0.0
        delay = backoff_delay(self.failures_after_success)
        return max(0.0, (self.last_failure + timedelta(seconds=delay) - now).total_seconds())


def backoff_delay(failures: int) -> float:
    """10 s doubling per failure since the last success, at most 10 minutes."""
    if failures <= 0:
        return 0.0
    return min(DEFAULT_BACKOFF * 2 ** (failures - 1), MAX_BACKOFF)


# --- conditions and status ---------------------------------------------------------------------------


def set_condition(status: Obj, kind: str, value: str, reason: str, message: str, now: str) -> bool:
    """Add or change a condition (lastTransitionTime moves only when its status changes); True if changed."""
    conditions = status.setdefault("conditions", [])
    for c in conditions:
        if c.get("type") != kind:
            continue
        if (c.get("status"), c.get("reason"), c.get("message")) == (value, reason, message):
            return False
        if c.get("status") != value:
            c["lastTransitionTime"] = now
        c.update(status=value, reason=reason, message=message, lastProbeTime=now)
        return True
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastProbeTime": now,
            "lastTransitionTime": now,
        }
    )
    return True
