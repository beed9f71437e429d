"""Waiting for an asyncio.Event with a bound, without losing a cancel.

Python 3.11's `asyncio.wait_for(event.wait(), timeout)` returns normally when a cancel lands in the same
loop iteration as the event is set: the cancel is swallowed, and a loop that relies on it to stop runs on
(the API server that failed to bind its port hung at exit on its APIService checker this way; the agent's
certificate rotator did the same a session earlier). `asyncio.timeout`, which 3.12 rebuilt `wait_for` on,
keeps the cancel. Every bounded wait for an event goes through `wait_event`.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float | None) -> None:
    """`await event.wait()` for at most `seconds` (None: no bound): TimeoutError when it runs
    out, as `asyncio.wait_for` raises; a cancel of the caller always propagates."""
    async with asyncio.timeout(seconds):
        await event.wait()
