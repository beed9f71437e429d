"""The scheduler as a supervised child process (how `pykubelet server` runs it): it schedules, comes
back after being killed, and is gone once stopped."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from controlplane.supervisor import component_command, supervise

pytestmark = pytest.mark.integration


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_bound(cluster, name: str) -> str:
    async with asyncio.timeout(30):
        while not (node := cluster.get(name).spec.node_name):
            await asyncio.sleep(0.05)
    return str(node)


async def test_supervised_scheduler_restarts_and_stops(apiserver, cluster, tmp_path):
    node = cluster.add_node("sup")
    stop = asyncio.Event()
    pids: asyncio.Queue[int] = asyncio.Queue()
    log = tmp_path / "scheduler.log"
    # A short lease: the replacement of a killed scheduler waits for the dead one's lease to expire.
    config = tmp_path / "sched.yaml"
    config.write_text("leaderElection: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 500ms}\n")
    task = asyncio.create_task(
        supervise(
            component_command("scheduler", apiserver.scheduler_kubeconfig, config) + ["--secure-port", "0"],
            stop,
            log,
            pids,
        )
    )
    try:
        first = await asyncio.wait_for(pids.get(), 10)
        cluster.create(cluster.pod("one"))
        assert await wait_bound(cluster, "one") == node
        os.kill(first, signal.SIGKILL)  # a crash: the supervisor starts a new one
        second = await asyncio.wait_for(pids.get(), 15)
        assert second != first
        cluster.create(cluster.pod("two"))
        assert await wait_bound(cluster, "two") == node
        stop.set()
        await asyncio.wait_for(task, 20)
        assert not alive(second)
        assert "scheduler stopped" in log.read_text()  # a clean SIGTERM shutdown, not a kill
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
