"""Every simulated node's heartbeats on one timetable: its Lease renewed every quarter of its duration,
its Node status reported every `status_report_frequency`, as a kubelet does when nothing changes.

One heap of due times for all nodes, not a task per node: a thousand nodes are a thousand entries, and
their renewals are spread evenly over the interval from the start (node i begins at i/N of it), so the
server sees a steady rate rather than bursts. A failed write is retried with back-off (200 ms doubling to
7 s, as the kubelet's lease controller), reported when a node's failures start and when they end.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from nodesim.nodeobjects import lease_object, lease_path, micro_now, now
from nodesim.settings import SimSettings

log = logging.getLogger("nodesim.heartbeats")

LEASE, STATUS = "lease", "status"


@dataclass
class SimNode:
    name: str
    index: int
    uid: str
    ip: str
    lease: dict[str, Any] | None = None
    renewals: int = 0
    status_reports: int = 0
    failing: dict[str, Backoff] = field(default_factory=dict)


class Heartbeats:
    def __init__(self, client: KubeClient, settings: SimSettings, gate: asyncio.Semaphore) -> None:
        self.client = client
        self.settings = settings
        self.gate = gate
        self.nodes: dict[str, SimNode] = {}
        self._due: list[tuple[float, int, str, str]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.errors = 0

    def add(self, node: SimNode) -> None:
        self.nodes[node.name] = node
        spread = node.index / max(1, self.settings.nodes)
        start = time.monotonic()
        self._schedule(start + spread * self.settings.lease_interval, LEASE, node.name)
        self._schedule(start + (0.5 + spread) * self.settings.status_report_frequency, STATUS, node.name)

    def _schedule(self, at: float, what: str, name: str) -> None:
        heapq.heappush(self._due, (at, next(self._seq), what, name))
        self._wake.set()

    async def run(self) -> None:
        """Until cancelled: start each heartbeat as it falls due (each one waits for the request gate)."""
        try:
            while True:
                self._wake.clear()
                now_ = time.monotonic()
                while self._due and self._due[0][0] <= now_:
                    _, _, what, name = heapq.heappop(self._due)
                    if name in self.nodes:
                        task = asyncio.create_task(self._beat(what, self.nodes[name]))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
                delay = self._due[0][0] - now_ if self._due else 3600.0
                try:
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
                except TimeoutError:
                    pass
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _beat(self, what: str, node: SimNode) -> None:
        job: Callable[[SimNode], Awaitable[None]] = self._renew if what == LEASE else self._report
        interval = self.settings.lease_interval if what == LEASE else self.settings.status_report_frequency
        try:
            async with self.gate:
                await job(node)
        except ApiError as err:
            self.errors += 1
            backoff = node.failing.get(what)
            if backoff is None:
                backoff = node.failing[what] = Backoff(initial=0.2, maximum=7.0)
                log.warning("node %s: %s write failed, retrying with back-off: %s", node.name, what, err)
            self._schedule(time.monotonic() + min(backoff.next(), interval), what, node.name)
            return
        if node.failing.pop(what, None) is not None:
            log.info("node %s: %s writes succeed again", node.name, what)
        self._schedule(time.monotonic() + interval, what, node.name)

    async def _renew(self, node: SimNode) -> None:
        if node.lease is not None:
            body = dict(node.lease)
            body["spec"] = {**(body.get("spec") or {}), "renewTime": micro_now()}
            try:
                node.lease = await self.client.replace(lease_path(node.name), body)
                node.renewals += 1
                return
            except ApiError as err:
                if not (err.conflict or err.not_found):
                    raise
                node.lease = None
        try:
            node.lease = await self.client.get(lease_path(node.name))
        except ApiError as err:
            if not err.not_found:
                raise
            body = lease_object(node.name, node.uid, self.settings.lease_duration)
            path = lease_path(node.name).rsplit("/", 1)[0]
            node.lease = await self.client.create(path, body)
            node.renewals += 1
            return
        await self._renew(node)

    async def _report(self, node: SimNode) -> None:
        """The periodic status report: every condition's heartbeat time moves, nothing else."""
        stamp = now()
        current = await self.client.get(f"/api/v1/nodes/{node.name}")
        conditions = [
            {"type": c["type"], "lastHeartbeatTime": stamp}
            for c in (current.get("status") or {}).get("conditions") or []
        ]
        await self.client.patch(f"/api/v1/nodes/{node.name}/status", {"status": {"conditions": conditions}})
        node.status_reports += 1
