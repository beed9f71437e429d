"""The runtime's health as the node's Ready condition judges it (upstream's runtimeState and
updateRuntimeUp): the CRI Status call is asked every 5 s by a loop of its own, and the node turns NotReady for an unanswered
runtime only after it has not answered (with RuntimeReady) for 30 s, not at the first failed call; what
the runtime last said about itself and its network stays meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from agent.cri import CRIClient, CRIError, runtime_condition
from agent.node.status import RuntimeHealth

log = logging.getLogger("agent.node.runtime")

RUNTIME_SYNC_THRESHOLD = 30.0  # upstream's maxWaitForContainerRuntime
RUNTIME_UP_PERIOD = 5.0  # upstream runs updateRuntimeUp every 5 s


async def runtime_status(cri: CRIClient) -> RuntimeHealth:
    """One CRI Status call: reachable False when it failed."""
    try:
        status = await cri.status()
    except CRIError:
        return RuntimeHealth(reachable=False)
    rt = runtime_condition(status, "RuntimeReady")
    net = runtime_condition(status, "NetworkReady")
    version = f"{cri.version.runtime_name}://{cri.version.runtime_version}" if cri.version else ""
    return RuntimeHealth(
        reachable=True,
        runtime_ready=bool(rt and rt.status),
        runtime_reason=rt.reason if rt else "",
        runtime_message=rt.message if rt else "",
        network_ready=bool(net and net.status),
        network_reason=net.reason if net else "",
        network_message=net.message if net else "",
        version=version,
    )


class RuntimeTracker:
    def __init__(
        self,
        probe: Callable[[], Awaitable[RuntimeHealth]],
        threshold: float = RUNTIME_SYNC_THRESHOLD,
        clock: Callable[[], float] = time.monotonic,
        period: float = RUNTIME_UP_PERIOD,
    ) -> None:
        self.probe = probe
        self.threshold = threshold
        self.clock = clock
        self.period = period
        self.checked_at: float | None = None
        self.last_sync: float | None = None  # the last answer with RuntimeReady
        self.last: RuntimeHealth | None = None  # the last answer at all

    async def check(self) -> RuntimeHealth:
        """Ask the runtime now and judge."""
        answer = await self.probe()
        self.checked_at = self.clock()
        if answer.reachable:
            self.last = answer
            if answer.runtime_ready:
                self.last_sync = self.clock()
        return self.health()

    async def current(self) -> RuntimeHealth:
        """The judgement as of the last check, asking now only when none was made this period (before
        the loop's first round, or while it is stalled)."""
        if self.checked_at is None or self.clock() - self.checked_at >= self.period:
            return await self.check()
        return self.health()

    async def run(self) -> None:
        """upstream's updateRuntimeUp loop."""
        while True:
            try:
                await self.check()
            except Exception:  # a probe bug must not end the loop: the node would never turn NotReady
                log.exception("runtime status check crashed")
            await asyncio.sleep(self.period)

    def health(self) -> RuntimeHealth:
        last = self.last or RuntimeHealth(reachable=False)
        if self.last_sync is None:
            down = "container runtime status check may not have completed yet"
            return dataclasses.replace(last, reachable=False, down=down, stale=self.last is not None)
        if self.clock() - self.last_sync >= self.threshold:
            return dataclasses.replace(last, reachable=False, stale=True)
        return dataclasses.replace(last, reachable=True)
