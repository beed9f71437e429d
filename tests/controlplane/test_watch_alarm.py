"""The watch pump's wait: the next queued event at once, or TimeoutError when its alarm rings; one timer
stands across any number of events (not a timer per event), and a closed watcher wakes it."""

from __future__ import annotations

import asyncio

import pytest

from controlplane.apiserver.watch import _Alarm
from controlplane.storage.cache import CLOSED, CachedObject, CacheEvent, WatchCache
from controlplane.storage.sqlite import SQLiteStore


@pytest.fixture
async def cache(tmp_path):
    store = SQLiteStore(tmp_path / "db")
    await store.start()
    c = WatchCache(store)
    await c.start()
    yield c
    await c.stop()
    await store.close()


def event(rev: int) -> CacheEvent:
    return CacheEvent("ADDED", CachedObject("/configmaps/ns/a", b"{}", rev, {}), None, rev)


async def test_events_come_through_one_standing_timer(cache: WatchCache) -> None:
    watcher = cache.watch("configmaps", "/configmaps/", None, cache.revision)
    alarm = _Alarm(asyncio.get_running_loop())
    waiting = asyncio.create_task(alarm.next(watcher, 30))
    await asyncio.sleep(0)
    timer = alarm.timer
    assert timer is not None and watcher.waiter is not None
    watcher._put(event(1))
    assert (await waiting).revision == 1
    assert watcher.waiter is None
    watcher._put(event(2))
    assert (await alarm.next(watcher, 30)).revision == 2  # queued: no wait
    waiting = asyncio.create_task(alarm.next(watcher, 30))
    await asyncio.sleep(0)
    assert alarm.timer is timer  # the same timer, still standing
    watcher.close()
    assert await waiting is CLOSED
    alarm.cancel()
    assert timer.cancelled()


async def test_the_alarm_ends_a_wait_with_nothing_queued(cache: WatchCache) -> None:
    watcher = cache.watch("configmaps", "/configmaps/", None, cache.revision)
    alarm = _Alarm(asyncio.get_running_loop())
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(alarm.next(watcher, 0.01), 5)
    assert alarm.timer is None and watcher.waiter is None  # rung: the next wait arms a new one
    watcher.close()
