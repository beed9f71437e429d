"""The scheduling queue: ordering, backoff 1 s doubling to 10 s, moves on cluster changes."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.scheduler import hints
from controlplane.scheduler.queue import (
    ACTIVE,
    BACKOFF,
    GATED,
    UNSCHEDULABLE,
    SchedulingQueue,
    backoff_duration,
)
from tests.scheduler.helpers import make_node, make_pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_to_the_cap():
    assert [backoff_duration(n, 1.0, 10.0) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


async def test_priority_then_fifo():
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    low1, high, low2 = make_pod(name="low1"), make_pod(name="high", priority=100), make_pod(name="low2")
    for p in (low1, high, low2):
        q.add(p)
        clock.now += 1
    assert [(await q.pop()).info.name for _ in range(3)] == ["high", "low1", "low2"]


async def test_unschedulable_waits_for_a_move_then_its_backoff():
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    q.add(make_pod(name="p"))
    qp = await q.pop()
    q.unschedulable(qp)
    assert q.counts()[UNSCHEDULABLE] == 1
    clock.now += 60  # time alone does not retry it (until the 5 minute flush)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(q.pop(), 0.05)
    q.move_all()  # backoff (1 s) long over: straight to active
    assert q.counts()[ACTIVE] == 1
    qp = await q.pop()
    assert qp.attempts == 2
    q.unschedulable(qp)
    q.move_all()  # second failure: 2 s backoff, not over yet
    assert q.counts()[BACKOFF] == 1
    clock.now += 2.01
    assert (await asyncio.wait_for(q.pop(), 1)).info.name == "p"


async def test_change_during_the_attempt_sends_the_pod_to_backoff():
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    q.add(make_pod(name="p"))
    qp = await q.pop()
    q.move_all()  # e.g. a node was added while this pod was being decided
    q.unschedulable(qp)
    assert q.counts()[BACKOFF] == 1


async def test_unschedulable_pods_are_flushed_after_five_minutes():
    clock = Clock()
    q = SchedulingQueue(clock=clock, flush_after=300)
    q.add(make_pod(name="p"))
    q.unschedulable(await q.pop())
    clock.now += 301
    assert (await asyncio.wait_for(q.pop(), 1)).info.name == "p"


async def test_delete_and_gates_and_spec_updates():
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    gone = make_pod(name="gone")
    q.add(gone)
    q.delete(gone.uid)
    gated = make_pod(name="gated", schedulingGates=[{"name": "wait"}])
    q.add(gated)
    assert q.counts()[GATED] == 1
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(q.pop(), 0.05)
    ungated = make_pod(name="gated")
    q.add(ungated)
    qp = await q.pop()
    assert qp.info.name == "gated"
    q.unschedulable(qp)
    clock.now += 5
    # A status-only update changes nothing; a spec change (e.g. a new toleration) retries the pod.
    same = make_pod(name="gated")
    same.obj["status"] = {"phase": "Pending"}
    q.add(same)
    assert q.counts()[UNSCHEDULABLE] == 1
    q.add(make_pod(name="gated", tolerations=[{"operator": "Exists"}]))
    assert q.counts()[ACTIVE] == 1


async def test_a_pod_deleted_after_pop_is_no_longer_owned():
    q = SchedulingQueue(clock=Clock())
    q.add(make_pod(name="p"))
    qp = await q.pop()
    assert q.owns(qp)
    q.delete(qp.info.uid)
    assert not q.owns(qp)
    q.unschedulable(qp)  # a late failure report does not bring it back
    assert sum(q.counts().values()) == 0


async def test_pod_updated_during_its_attempt_goes_to_backoff():
    q = SchedulingQueue(clock=Clock())
    q.add(make_pod(name="p"))
    qp = await q.pop()
    q.add(make_pod(name="p", tolerations=[{"operator": "Exists"}]))  # e.g. a toleration was added
    q.unschedulable(qp)
    assert q.counts()[BACKOFF] == 1
    assert qp.info.tolerations  # the next attempt sees the new spec


async def test_queueing_hints_move_only_pods_a_change_may_help():
    """A pod NodeAffinity rejected ignores a pod going away but wakes when a node's labels change; one
    NodeResourcesFit rejected is the other way round (upstream's queueing hints)."""
    clock = Clock()
    q = SchedulingQueue(clock=clock)
    q.add(make_pod(name="picky"))
    q.add(make_pod(name="hungry"))
    picky, hungry = await q.pop(), await q.pop()
    q.unschedulable(picky, frozenset({"NodeAffinity"}))
    q.unschedulable(hungry, frozenset({"NodeResourcesFit"}))
    clock.now += 60
    q.move_all(hints.POD_REMOVED)
    assert (picky.where, hungry.where) == (UNSCHEDULABLE, ACTIVE)
    before = make_node("n", labels={"a": "1"}).facts
    relabelled = make_node("n", labels={"a": "2"}).facts
    assert hints.node_changed(before, before) == frozenset()
    q.move_all(hints.node_changed(before, relabelled))
    assert picky.where == ACTIVE
    # A node never seen before may help anyone.
    assert hints.node_changed(None, before) is None
