"""The API server and the scheduler on one event loop in one process: what `pykubelet server` becomes
once it embeds the scheduler. The throughput bench starts this to compare against separate processes.

Usage: python bench/scheduler/embedded_server.py DATA_DIR PORT
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from controlplane.apiserver.server import ApiServer, ServerConfig
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.runner import run_scheduler
from kubeclient.eventloop import termination_event


async def main(data_dir: Path, port: int) -> None:
    # No controller manager makes namespaces' `default` accounts here: the ServiceAccount plugin is off.
    server = ApiServer(
        ServerConfig(
            data_dir=data_dir,
            port=port,
            disable_admission_plugins=["ServiceAccount", "TaintNodesByCondition"],
        )
    )
    await server.start()
    stop = termination_event()
    try:
        await run_scheduler(data_dir / "scheduler.conf", SchedulerConfig(), stop)  # its own identity
    finally:
        await server.stop()


if __name__ == "__main__":
    from kubeclient import logsetup

    logsetup.configure()
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main(Path(sys.argv[1]), int(sys.argv[2])))
