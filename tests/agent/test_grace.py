"""The grace period a deleted pod's containers are stopped with, as the upstream kubelet computes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.pods.worker import MIN_GRACE, remaining_grace


def _pod(meta: dict, grace: int | None = 30) -> dict:
    return {"metadata": meta, "spec": {"terminationGracePeriodSeconds": grace}}


def test_deleting_pod_gets_its_whole_deletion_grace_period() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, 900_000, tzinfo=UTC)
    # The server truncated now + 3 s to the second: a deadline-based count would give 2 s.
    stamp = (now + timedelta(seconds=3)).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = _pod({"deletionTimestamp": stamp, "deletionGracePeriodSeconds": 3}, grace=3)
    assert remaining_grace(pod, now) == 3


def test_minimum_and_fallbacks() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    assert remaining_grace(_pod({"deletionTimestamp": "2026-11-29T12:00:00Z", "deletionGracePeriodSeconds": 0}), now) == MIN_GRACE
    # No period recorded: count down to the timestamp.
    assert remaining_grace(_pod({"deletionTimestamp": "2026-11-29T12:00:10Z"}), now) == 10
    # Not being deleted (a kill for another reason): the spec's period.
    assert remaining_grace(_pod({}, grace=7), now) == 7
