"""`run_scheduler`: the one call that embeds the scheduler (in `pykubelet server`) or runs it alone."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.metrics import SchedulerMetrics
from controlplane.scheduler.scheduler import Scheduler
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.leaderelection import LeaderElector, LeadershipLost, run_as_leader
from kubeclient.secureport import SecureServingOptions, serve_secure_port

log = logging.getLogger(__name__)

__all__ = ["LeadershipLost", "run_scheduler"]


async def run_scheduler(
    kubeconfig: Path,
    config: SchedulerConfig | None = None,
    stop: asyncio.Event | None = None,
    serving: SecureServingOptions | None = None,
) -> None:
    """Schedule pods through the API server named by `kubeconfig` until `stop` is set (or forever).

    With leader election (the default) it first waits to hold the lease, and raises LeadershipLost if
    it stops holding it. With `serving`, the secure port (health and scheduler_* metrics) is served
    from the start, leading or not, as upstream's."""
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
    metrics = SchedulerMetrics()

    async def schedule(halt: asyncio.Event) -> None:
        scheduler = Scheduler(client, config, metrics=metrics)
        metrics.live = scheduler.live_state
        try:
            await scheduler.run(halt)
        finally:
            metrics.live = lambda: None
        log.info(
            "scheduler stopped scheduled=%d unschedulable=%d bind_errors=%d",
            scheduler.stats.scheduled,
            scheduler.stats.unschedulable,
            scheduler.stats.bind_errors,
        )

    secure_port = None
    try:
        if serving is not None:
            secure_port = await serve_secure_port(client, serving, "kube-scheduler", metrics.exposition)
        log.info(
            "scheduler starting name=%s strategy=%s server=%s",
            config.scheduler_name,
            config.scoring_strategy,
            client.server,
        )
        await run_as_leader(elector, stop, schedule)
    finally:
        if secure_port is not None:
            await secure_port.close()
        await client.close()
