"""`run_scheduler`: the one call that embeds the scheduler (in `pykubelet server`) or runs it alone."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.scheduler import Scheduler
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.leaderelection import LeaderElector, LeadershipLost, run_as_leader

log = logging.getLogger(__name__)

__all__ = ["LeadershipLost", "run_scheduler"]


async def run_scheduler(
    kubeconfig: Path, config: SchedulerConfig | None = None, stop: asyncio.Event | None = None
) -> None:
    """Schedule pods through the API server named by `kubeconfig` until `stop` is set (or forever).

    With leader election (the default) it first waits to hold the lease, and raises LeadershipLost if
    it stops holding it."""
    config = config or SchedulerConfig()
    stop = stop or asyncio.Event()
    # No client-side rate limit by default: the scheduler's throughput is bounded by its bind slots
    # (config.bind_concurrency), which are the back-pressure; upstream's kube-scheduler defaults to
    # clientConnection qps 50 / burst 100.
    client = KubeClient(
        load_kubeconfig(kubeconfig),
        qps=config.client_qps,
        burst=config.client_burst,
        component=config.scheduler_name,
        max_connections=config.bind_concurrency + 8,
    )
    elector = LeaderElector(client, config.leader_election) if config.leader_election.enabled else None

    async def schedule(halt: asyncio.Event) -> None:
        scheduler = Scheduler(client, config)
        await scheduler.run(halt)
        log.info(
            "scheduler stopped scheduled=%d unschedulable=%d bind_errors=%d",
            scheduler.stats.scheduled,
            scheduler.stats.unschedulable,
            scheduler.stats.bind_errors,
        )

    try:
        log.info(
            "scheduler starting name=%s strategy=%s server=%s",
            config.scheduler_name,
            config.scoring_strategy,
            client.server,
        )
        await run_as_leader(elector, stop, schedule)
    finally:
        await client.close()
