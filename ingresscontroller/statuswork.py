"""The Lease holder's status writes, off the configuration sync's path.

At 1 000 objects a sync that also wrote their statuses (a PUT each) held the next change behind those
writes for seconds: in bench/ingress/routes.py the slowest change to served (1.8 to 4.5 s against a
median of 0.3 to 0.6 s) was the first one after the bulk creation, queued behind 1 000 status PUTs. A
sync now hands what it served to this worker and returns; the worker writes one hand-over at a time,
always the newest (one still waiting when a newer comes is replaced, never written stale), while the
next syncs go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger("ingresscontroller.status")

T = TypeVar("T")


@dataclass
class StatusWork(Generic[T]):
    write: Callable[[T], Awaitable[None]]
    passes: int = 0  # hand-overs written (a failed pass counts: it is retried on the next hand-over)
    _latest: T | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _done: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._done.set()

    def hand_over(self, item: T) -> None:
        self._latest = item
        self._done.clear()
        self._wake.set()

    async def idle(self) -> None:
        """Until every hand-over so far is written."""
        await self._done.wait()

    async def run(self) -> None:
        """Write hand-overs until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            item, self._latest = self._latest, None
            if item is not None:
                try:
                    await self.write(item)
                except Exception:  # one failed pass never ends the writes: the next hand-over retries
                    log.exception("status writes failed")
                self.passes += 1
            if self._latest is None:
                self._done.set()
