"""backoffLimitPerIndex of Indexed Jobs (upstream's indexed_job_utils.go), without I/O: each index may
fail backoffLimitPerIndex times before it is a failed index (status.failedIndexes) and gets no more pods;
more than maxFailedIndexes failed indexes fail the Job (MaxFailedIndexesExceeded); every index either
succeeded or failed, with a failed one among them, fails it too (FailedIndexes).

An index's failures so far travel on its pods as the `batch.kubernetes.io/job-index-failure-count`
annotation: a replacement carries one more than the failed pod it replaces, so the count survives the
failed pods being cleaned up and a controller restart. Each index backs off on its own failures (10 s
doubling, as the Job's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers.job import pods as jp

Obj = dict[str, Any]

FAILURE_COUNT = jp.INDEX_FAILURE_COUNT
MAX_FAILED_INDEXES = (
    "MaxFailedIndexesExceeded",
    "Job has exceeded the specified maximal number of failed indexes",
)
FAILED_INDEXES = ("FailedIndexes", "Job has failed indexes")


def failure_count(pod: Obj) -> int:
    try:
        return int(((pod.get("metadata") or {}).get("annotations") or {}).get(FAILURE_COUNT, 0))
    except (TypeError, ValueError):
        return 0


@dataclass
class IndexFailures:
    """Per index: failures so far and when the latest failed pod finished."""

    counts: dict[int, int] = field(default_factory=dict)
    last: dict[int, datetime] = field(default_factory=dict)

    @classmethod
    def of(cls, job: Obj, pods: list[Obj], completions: int, now: datetime) -> IndexFailures:
        out = cls()
        for pod in pods:
            if jp.phase(pod) != "Failed" and not jp.is_failed(pod, job):
                continue
            index = jp.index_of(pod, completions)
            if index is None:
                continue
            count = failure_count(pod) + 1
            out.counts[index] = max(out.counts.get(index, 0), count)
            when = jp.finish_time(pod, now)
            if index not in out.last or when > out.last[index]:
                out.last[index] = when
        return out

    def failed(self, limit: int) -> set[int]:
        return {i for i, count in self.counts.items() if count > limit}

    def wait(self, index: int, now: datetime, delay: Any) -> float:
        """Seconds until the index may have a new pod (`delay(failures)` is the backoff)."""
        count = self.counts.get(index, 0)
        if not count or index not in self.last:
            return 0.0
        return max(0.0, (self.last[index] + timedelta(seconds=delay(count)) - now).total_seconds())


def verdict(
    failed: set[int], completed: set[int], completions: int, max_failed: int | None
) -> tuple[str, str] | None:
    """Whether the failed indexes fail the Job."""
    if max_failed is not None and len(failed) > max_failed:
        return MAX_FAILED_INDEXES
    if failed and len(failed | completed) >= completions:
        return FAILED_INDEXES
    return None
