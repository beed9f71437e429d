"""The grace period a pod's containers are stopped with, as the upstream kubelet computes it: the pod
worker's effective grace period (calculateEffectiveGracePeriod) and a container's own
(setTerminationGracePeriod)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent.pods.actions import REASON_LIVENESS, REASON_STARTUP
from agent.pods.killing import MIN_GRACE, termination_grace
from agent.pods.podstate import effective_grace


def _pod(meta: dict, grace: int | None = 30) -> dict:
    return {"metadata": meta, "spec": {"terminationGracePeriodSeconds": grace}}


def test_deleting_pod_gets_its_whole_deletion_grace_period() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, 900_000, tzinfo=UTC)
    # The server truncated now + 3 s to the second: a deadline-based count would give 2 s.
    stamp = (now + timedelta(seconds=3)).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = _pod({"deletionTimestamp": stamp, "deletionGracePeriodSeconds": 3}, grace=3)
    assert effective_grace(None, pod) == (3, False)


def test_grace_only_shrinks_and_a_shorter_one_is_reported() -> None:
    pod = _pod({"deletionTimestamp": "2026-11-29T12:00:30Z", "deletionGracePeriodSeconds": 30})
    assert effective_grace(None, pod) == (30, False)
    shorter = _pod({"deletionTimestamp": "2026-11-29T12:00:01Z", "deletionGracePeriodSeconds": 1})
    assert effective_grace(30, shorter) == (1, True)
    assert effective_grace(1, pod) == (1, False)  # a longer one never takes over
    assert effective_grace(30, pod, override=5) == (5, True)


def test_fallbacks() -> None:
    # Force-deleted (gone from the API) or killed for another reason: the spec's period.
    assert effective_grace(None, _pod({}, grace=7)) == (7, False)
    # An explicit 0 stays 0 there (never less than 1 s; the stop itself then gives at least 2 s).
    assert effective_grace(None, _pod({"deletionGracePeriodSeconds": 0})) == (1, False)
    assert effective_grace(None, _pod({}, grace=None)) == (1, False)


def test_a_containers_own_grace_period() -> None:
    container = {"name": "c", "livenessProbe": {"terminationGracePeriodSeconds": 4}, "startupProbe": {}}
    assert termination_grace(_pod({}, grace=20), container) == 20
    assert termination_grace(_pod({}, grace=20), container, REASON_LIVENESS) == 4
    assert (
        termination_grace(_pod({}, grace=20), container, REASON_STARTUP) == 20
    )  # the startup probe sets none
    assert (
        termination_grace(_pod({"deletionGracePeriodSeconds": 9}, grace=20), container, REASON_LIVENESS) == 9
    )
    assert termination_grace(_pod({}, grace=None), container) == MIN_GRACE
