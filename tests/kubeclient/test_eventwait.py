"""A bounded event wait never loses a cancel: a loop waiting on an event that is set in the same
iteration as its task is cancelled stops (Python 3.11's asyncio.wait_for swallows that cancel)."""

from __future__ import annotations

import asyncio

import pytest

from kubeclient.eventwait import wait_event


async def _checker_loop(event: asyncio.Event, rounds: list[int]) -> None:
    """The shape of the API server's APIService checker: wait for a wake-up or the resync, then work."""
    while True:
        try:
            await wait_event(event, 30)
        except TimeoutError:
            pass
        event.clear()
        rounds.append(1)


async def test_a_cancel_that_lands_as_the_event_is_set_stops_the_loop() -> None:
    for _ in range(20):  # the race is certain here, but take a few shots at it anyway
        event, rounds = asyncio.Event(), []
        task = asyncio.create_task(_checker_loop(event, rounds))
        await asyncio.sleep(0)  # the loop is now waiting
        event.set()
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=2)
        assert task in done, "the loop ran on after its cancel"
        assert task.cancelled()


async def test_the_bound_raises_timeout_and_a_set_event_returns() -> None:
    event = asyncio.Event()
    with pytest.raises(TimeoutError):
        await wait_event(event, 0.01)
    event.set()
    await wait_event(event, 0.01)
