"""The certificate rotator's loop on its own (the rotation against a real API server is
tests/agent/test_bootstrap_integration.py): stop() ends it even when the cancel is lost."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from agent.node.certrotation import CertRotator
from kubeclient.serving import ensure_self_signed


class LosesItsCancel(CertRotator):
    """A rotation that goes on when cancelled, as Python 3.11's wait_for does when the cancel lands just
    as what it waits for (the issued CSR) arrives; it also puts the clock back, so the next deadline is
    months away."""

    def __init__(self, current: Path) -> None:
        self.offset = dt.timedelta(days=366)
        super().__init__([], "n1", current, clock=lambda: dt.datetime.now(dt.UTC) + self.offset)
        self.started = asyncio.Event()

    async def rotate(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()  # in flight until cancelled
        except asyncio.CancelledError:
            pass  # the result came with the cancel: returned, the cancel lost
        self.offset = dt.timedelta(0)
        self.rotations += 1


async def test_stop_ends_the_loop_even_when_a_rotation_swallows_the_cancel(tmp_path: Path) -> None:
    current, _ = ensure_self_signed(tmp_path, "n1", [], "kubelet-client-current")  # valid a year
    rotator = LosesItsCancel(current)
    rotator.start()
    await asyncio.wait_for(rotator.started.wait(), 10)  # the clock is past the deadline: at once
    await asyncio.wait_for(rotator.stop(), 5)  # not a sleep toward a deadline months away
    assert rotator.rotations == 1
