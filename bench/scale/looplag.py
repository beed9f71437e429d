"""How late the bench's own event loop wakes a 100 ms ticker. The density bench times its probe calls,
decodes every pod event and feeds its watchers on one loop: a probe's client-timed latency includes the
time the loop was busy elsewhere before it saw the answer. The ticker's lateness over the same run shows
how much of that figure is the client's own."""

from __future__ import annotations

import asyncio
from typing import Any


class LoopLag:
    def __init__(self, period: float = 0.1) -> None:
        self.period = period
        self.late: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.period
            await asyncio.sleep(self.period)
            self.late.append(max(0.0, loop.time() - due))

    def result(self) -> dict[str, Any]:
        ordered = sorted(self.late)

        def at(q: float) -> float:
            return (
                round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else float("nan")
            )

        return {
            "period_s": self.period,
            "n": len(ordered),
            "p50": at(0.50),
            "p99": at(0.99),
            "max": round(ordered[-1], 4) if ordered else float("nan"),
        }
