"""Events expire: upstream stores them with an etcd lease of --event-ttl (1 h) renewed on each write; we
sweep them from the registry once their last activity is older than the TTL, so a long-running cluster's
events do not grow without bound. The Event kind starts it.

A cluster of a thousand nodes holds tens of thousands of events: the sweep decodes only the events written
since its last round (an event's last activity changes only with a write, so it is remembered by
revision), and lets the event loop serve requests every few milliseconds; a sweep that decoded every
event in one stretch held every request for a second each minute."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from typing import Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.kinds.ports import Registry
from controlplane.apiserver.meta import now, parse_time
from controlplane.apiserver.options import DeleteOptions

log = logging.getLogger("controlplane.eventttl")


def last_activity(event: dict[str, Any]) -> dt.datetime | None:
    stamps = [
        event.get("lastTimestamp"),
        event.get("eventTime"),
        (event.get("series") or {}).get("lastObservedTime"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ]
    times = [t for t in (parse_time(s) for s in stamps if isinstance(s, str)) if t is not None]
    return max(times) if times else None


# Key -> (revision, last activity) of the events a sweep saw: the next one decodes only what changed.
Seen = dict[str, tuple[int, dt.datetime | None]]
SLICE = 0.005  # seconds of sweeping before the event loop serves others


async def expire_events(
    registry: Registry,
    events: Kind,
    ttl: dt.timedelta,
    at: dt.datetime | None = None,
    seen: Seen | None = None,
) -> int:
    """Delete events idle for longer than `ttl` (as of `at`, default now); returns how many went. `seen`
    (kept by the caller between sweeps) is brought up to date with every event's last activity."""
    cutoff = (at or now()) - ttl
    expired = 0
    known = dict(seen or {})
    if seen is not None:
        seen.clear()
    started = time.perf_counter()
    for cached in registry.cache.list(events.bucket, events.prefix("")):
        if time.perf_counter() - started > SLICE:
            await asyncio.sleep(0)
            started = time.perf_counter()
        remembered = known.get(cached.key)
        if remembered is not None and remembered[0] == cached.revision:
            last = remembered[1]
        else:
            last = last_activity(cached.obj)
        if seen is not None:
            seen[cached.key] = (cached.revision, last)
        if last is None or last >= cutoff:
            continue
        meta = cached.view["metadata"]
        try:
            # At the version judged: an event written again meanwhile (the sweep yields) is a 409, kept.
            options = DeleteOptions(uid=meta.get("uid"), resource_version=str(cached.revision))
            await registry.delete(events, meta.get("namespace", ""), meta["name"], options)
            expired += 1
            started = time.perf_counter()
        except ApiError as err:
            if err.code not in (404, 409):
                raise
    return expired


class EventTTL:
    def __init__(self, registry: Registry, events: Kind, ttl_seconds: float, interval: float = 60.0) -> None:
        self.registry = registry
        self.events = events
        self.ttl = dt.timedelta(seconds=ttl_seconds)
        self.interval = interval
        self._task: asyncio.Task[None] | None = None
        self._seen: Seen = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event-ttl")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                expired = await expire_events(self.registry, self.events, self.ttl, seen=self._seen)
                if expired:
                    log.info("event=events-expired count=%d", expired)
            except Exception:
                log.exception("event=event-ttl-failed")
