"""The taint eviction controller's pure parts: which tolerations match which taints, when a pod goes,
and the timed work queue that deletes it (or forgets it in time)."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.controllers import taints as tu
from controlplane.controllers.tainteviction import AFTER, NEVER, NOW, Plan, plan
from controlplane.controllers.timedworkers import TimedWorkerQueue

UNREACHABLE = {
    "key": "node.kubernetes.io/unreachable",
    "effect": "NoExecute",
    "timeAdded": "2025-01-01T00:00:00Z",
}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
CUSTOM = {"key": "example.com/dedicated", "value": "db", "effect": "NoExecute"}


def tol(
    key: str = "", operator: str = "Exists", effect: str = "", value: str = "", seconds: int | None = None
) -> dict:
    out = {"key": key, "operator": operator, "effect": effect, "value": value}
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return {k: v for k, v in out.items() if v != ""}


@pytest.mark.parametrize(
    "toleration, tolerated",
    [
        (tol("node.kubernetes.io/unreachable", effect="NoExecute"), True),
        (tol("node.kubernetes.io/unreachable"), True),  # any effect
        (tol(), True),  # empty key with Exists: everything
        (tol("node.kubernetes.io/unreachable", effect="NoSchedule"), False),
        (tol("node.kubernetes.io/not-ready", effect="NoExecute"), False),
        (tol("node.kubernetes.io/unreachable", operator="Equal", value=""), True),
        (tol("node.kubernetes.io/unreachable", operator="Equal", value="x"), False),
        (tol("node.kubernetes.io/unreachable", operator="Gt"), False),  # not an operator in 1.32
    ],
)
def test_tolerates(toleration, tolerated):
    assert tu.tolerates(toleration, UNREACHABLE) is tolerated


def test_equal_compares_the_value_and_an_omitted_operator_means_equal():
    assert tu.tolerates({"key": "example.com/dedicated", "value": "db"}, CUSTOM)
    assert not tu.tolerates({"key": "example.com/dedicated", "value": "web"}, CUSTOM)
    assert not tu.tolerates({"key": "example.com/dedicated"}, CUSTOM)


def test_untolerated_taint_goes_now():
    defaults = [
        tol("node.kubernetes.io/not-ready", effect="NoExecute", seconds=300),
        tol("node.kubernetes.io/unreachable", effect="NoExecute", seconds=300),
    ]
    assert plan([CUSTOM], defaults) == Plan(NOW)
    assert plan([UNREACHABLE], []) == Plan(NOW)


def test_the_shortest_tolerationseconds_of_the_matching_tolerations_counts():
    tolerations = [
        tol("node.kubernetes.io/unreachable", effect="NoExecute", seconds=5),
        tol("node.kubernetes.io/not-ready", effect="NoExecute", seconds=300),
    ]
    assert plan([UNREACHABLE], tolerations) == Plan(AFTER, 5.0)
    assert plan([UNREACHABLE, NOT_READY], tolerations) == Plan(AFTER, 5.0)
    assert plan([NOT_READY], tolerations) == Plan(AFTER, 300.0)


def test_forever_zero_and_first_match_wins():
    assert plan([UNREACHABLE], [tol("node.kubernetes.io/unreachable", effect="NoExecute")]) == Plan(NEVER)
    assert plan([UNREACHABLE], [tol("node.kubernetes.io/unreachable", seconds=0)]) == Plan(AFTER, 0.0)
    assert plan([UNREACHABLE], [tol("node.kubernetes.io/unreachable", seconds=-3)]) == Plan(AFTER, 0.0)
    # Upstream takes the first toleration that matches each taint: a later, shorter one is not used.
    first_forever = [tol("node.kubernetes.io/unreachable"), tol(seconds=1)]
    assert plan([UNREACHABLE], first_forever) == Plan(NEVER)
    # One forever and one timed taint: the timed one decides.
    mixed = [tol("node.kubernetes.io/unreachable"), tol("node.kubernetes.io/not-ready", seconds=7)]
    assert plan([UNREACHABLE, NOT_READY], mixed) == Plan(AFTER, 7.0)


def test_min_toleration_seconds():
    assert tu.min_toleration_seconds([]) == 0.0
    assert tu.min_toleration_seconds([tol()]) is None
    assert tu.min_toleration_seconds([tol(seconds=9), tol(seconds=4), tol()]) == 4.0


async def test_timed_work_runs_at_its_time_once_and_can_be_cancelled_before():
    done: list[str] = []
    fired = asyncio.Event()

    async def work(key: str) -> None:
        done.append(key)
        fired.set()

    loop = asyncio.get_running_loop()
    queue = TimedWorkerQueue(work, clock=loop.time)
    start = loop.time()
    queue.add("ns/late", start, start + 0.2)
    queue.add("ns/late", start, start + 0.05)  # already scheduled: kept as it was
    queue.add("ns/cancelled", start, start + 0.1)
    assert queue.cancel("ns/cancelled") and not queue.cancel("ns/cancelled")
    await asyncio.wait_for(fired.wait(), 2)
    assert loop.time() - start >= 0.2 - 0.01
    assert done == ["ns/late"]
    assert "ns/late" not in queue


async def test_due_work_starts_at_once_and_is_no_longer_cancellable():
    release = asyncio.Event()
    started = asyncio.Event()

    async def work(key: str) -> None:
        started.set()
        await release.wait()

    loop = asyncio.get_running_loop()
    queue = TimedWorkerQueue(work, clock=loop.time)
    now = loop.time()
    queue.add("ns/now", now, now)
    await asyncio.wait_for(started.wait(), 2)
    assert not queue.cancel("ns/now")  # running: nothing to cancel (and forgotten, as upstream)
    release.set()
    await queue.stop()
