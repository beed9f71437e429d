"""`run_scheduler`: the one call that embeds the scheduler (in `pykubelet server`) or runs it alone."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from controlplane.scheduler.client import ApiClient
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.kubeconfig import load_kubeconfig
from controlplane.scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)


async def run_scheduler(kubeconfig: Path, config: SchedulerConfig | None = None,
                        stop: asyncio.Event | None = None) -> None:
    """Schedule pods through the API server named by `kubeconfig` until `stop` is set (or forever)."""
    config = config or SchedulerConfig()
    stop = stop or asyncio.Event()
    client = ApiClient(load_kubeconfig(kubeconfig), max_connections=config.bind_concurrency + 8)
    try:
        scheduler = Scheduler(client, config)
        log.info("scheduler starting name=%s strategy=%s server=%s", config.scheduler_name,
                 config.scoring_strategy, client.conn.server)
        await scheduler.run(stop)
        log.info("scheduler stopped scheduled=%d unschedulable=%d bind_errors=%d", scheduler.stats.scheduled,
                 scheduler.stats.unschedulable, scheduler.stats.bind_errors)
    finally:
        await client.close()
