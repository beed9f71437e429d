"""`run_scheduler`: the one call that embeds the scheduler (in `pykubelet server`) or runs it alone."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from controlplane.scheduler.client import ApiClient
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.kubeconfig import load_kubeconfig
from controlplane.scheduler.leader import LeaderElector
from controlplane.scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)


class LeadershipLost(RuntimeError):
    """Another scheduler holds the lease now; this one stopped scheduling (upstream exits too)."""


async def run_scheduler(kubeconfig: Path, config: SchedulerConfig | None = None,
                        stop: asyncio.Event | None = None) -> None:
    """Schedule pods through the API server named by `kubeconfig` until `stop` is set (or forever).

    With leader election (the default) it first waits to hold the lease, and raises LeadershipLost if
    it stops holding it."""
    config = config or SchedulerConfig()
    stop = stop or asyncio.Event()
    client = ApiClient(load_kubeconfig(kubeconfig), max_connections=config.bind_concurrency + 8)
    elector = LeaderElector(client, config.leader_election) if config.leader_election.enabled else None
    lost = False
    try:
        log.info("scheduler starting name=%s strategy=%s server=%s", config.scheduler_name,
                 config.scoring_strategy, client.conn.server)
        if elector is not None and not await _until_stopped(elector.acquire(), stop):
            return
        scheduler = Scheduler(client, config)
        inner = asyncio.Event()  # set on an outside stop or on lost leadership
        watchers = [asyncio.create_task(_relay(stop, inner))]
        if elector is not None:
            watchers.append(asyncio.create_task(elector.hold()))
        watchers[-1].add_done_callback(lambda _: inner.set())
        try:
            await scheduler.run(inner)
        finally:
            lost = elector is not None and watchers[-1].done() and not stop.is_set()
            for w in watchers:
                w.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
        log.info("scheduler stopped scheduled=%d unschedulable=%d bind_errors=%d", scheduler.stats.scheduled,
                 scheduler.stats.unschedulable, scheduler.stats.bind_errors)
    finally:
        if elector is not None and not lost:
            await elector.release()
        await client.close()
    if lost:
        raise LeadershipLost("lost the scheduler lease")


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _until_stopped(work: Any, stop: asyncio.Event) -> bool:
    """Run `work` unless `stop` comes first; True if the work finished."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False
