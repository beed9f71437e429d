"""The work queue's rules, as client-go's workqueue tests state them: one entry per key, never two
workers on one key, re-adds while in flight run after, delays and per-key exponential backoff."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kubeclient.ratelimit import TokenBucket
from kubeclient.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    QueueMetrics,
    ShutDown,
    WorkQueue,
    default_controller_rate_limiter,
)


async def test_a_key_added_many_times_is_queued_once() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    for _ in range(3):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]


async def test_a_key_in_flight_is_not_given_out_again_until_done() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    key = await q.get()
    q.add("a")  # changed while a worker holds it
    assert len(q) == 0  # not handed to a second worker
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not second.done()
    q.done(key)  # now it runs again, once
    assert await asyncio.wait_for(second, 1) == "a"
    q.done("a")
    assert len(q) == 0


async def test_done_without_a_re_add_does_not_requeue() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    q.done(await q.get())
    assert len(q) == 0


async def test_add_after_releases_the_key_later_and_the_earliest_delay_wins() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add_after("a", 5.0)
    q.add_after("a", 0.05)  # earlier: wins
    q.add_after("a", 10.0)  # later: ignored
    assert len(q) == 0
    assert await asyncio.wait_for(q.get(), 2) == "a"


def test_item_exponential_backoff_doubles_per_key_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter(base=0.005, maximum=1000.0)
    assert [limiter.when("a") for _ in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert limiter.when("b") == 0.005  # per key
    assert limiter.num_requeues("a") == 4
    limiter.forget("a")
    assert limiter.when("a") == 0.005
    for _ in range(100):
        last = limiter.when("c")
    assert last == 1000.0


def test_default_limiter_is_the_longer_of_backoff_and_the_overall_bucket() -> None:
    now = [0.0]
    bucket = BucketRateLimiter(TokenBucket(10.0, 100, clock=lambda: now[0]))
    limiter = MaxOfRateLimiter((ItemExponentialFailureRateLimiter(), bucket))
    delays = [limiter.when(f"k{i}") for i in range(101)]
    assert delays[:100] == [0.005] * 100  # the burst of 100 costs nothing beyond backoff
    assert delays[100] == pytest.approx(0.1)  # the 101st waits for the 10 qps bucket
    assert isinstance(default_controller_rate_limiter(), MaxOfRateLimiter)


async def test_add_rate_limited_delays_by_the_limiter() -> None:
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=ItemExponentialFailureRateLimiter(base=0.02))
    q.add_rate_limited("a")
    assert len(q) == 0 and q.num_requeues("a") == 1
    assert await asyncio.wait_for(q.get(), 2) == "a"
    q.forget("a")
    assert q.num_requeues("a") == 0


async def test_shutdown_drains_then_workers_stop() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    held = await q.get()
    q.add("b")
    q.shutdown()
    q.add("c")  # refused after shutdown
    draining = asyncio.create_task(q.shutdown_with_drain())
    assert await q.get() == "b"
    q.done("b")
    await asyncio.sleep(0)
    assert not draining.done()  # "a" is still held
    q.done(held)
    await asyncio.wait_for(draining, 1)
    with pytest.raises(ShutDown):
        await q.get()


async def test_metrics_carry_client_go_names() -> None:
    registry = CollectorRegistry()
    q: WorkQueue[str] = WorkQueue("replicaset", metrics=QueueMetrics.of(registry))
    q.add("a")
    q.add_rate_limited("b")
    q.done(await q.get())
    q.observe_unfinished()
    text = generate_latest(registry).decode()
    for name in (
        "workqueue_adds_total",
        "workqueue_retries_total",
        "workqueue_depth",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_count",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ):
        assert any(
            line.startswith(name + "{") and 'name="replicaset"' in line for line in text.splitlines()
        ), name
    assert 'workqueue_adds_total{name="replicaset"} 1.0' in text
    assert 'workqueue_retries_total{name="replicaset"} 1.0' in text
