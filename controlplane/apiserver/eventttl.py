"""Events expire: upstream stores them with an etcd lease of --event-ttl (1 h) renewed on each write; we
sweep them from the registry once their last activity is older than the TTL, so a long-running cluster's
events do not grow without bound. The Event kind starts it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
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


async def expire_events(
    registry: Registry, events: Kind, ttl: dt.timedelta, at: dt.datetime | None = None
) -> int:
    """Delete events idle for longer than `ttl` (as of `at`, default now); returns how many went."""
    cutoff = (at or now()) - ttl
    expired = 0
    for cached in registry.cache.list(events.bucket, events.prefix("")):
        obj = cached.obj
        seen = last_activity(obj)
        if seen is None or seen >= cutoff:
            continue
        meta = obj["metadata"]
        try:
            await registry.delete(
                events, meta.get("namespace", ""), meta["name"], DeleteOptions(uid=meta.get("uid"))
            )
            expired += 1
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
                expired = await expire_events(self.registry, self.events, self.ttl)
                if expired:
                    log.info("event=events-expired count=%d", expired)
            except Exception:
                log.exception("event=event-ttl-failed")
