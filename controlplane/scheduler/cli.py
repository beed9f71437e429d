"""`pykubelet scheduler`: run the scheduler against any API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path

from kubeclient.eventloop import loop_factory, termination_event


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(default),
        help="kubeconfig of the API server (default: $KUBECONFIG or ~/.kube/config)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="KubeSchedulerConfiguration file (scoring strategy, score weights, backoff)",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hold the kube-system/kube-scheduler Lease before scheduling (default: on, or "
        "the config file's leaderElection.leaderElect)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")


def run(args: argparse.Namespace) -> int:
    from controlplane.scheduler.config import load_config
    from controlplane.scheduler.runner import run_scheduler

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    config = load_config(args.config)
    if args.leader_elect is not None:
        config.leader_election.enabled = args.leader_elect

    async def main() -> None:
        stop = termination_event()
        await run_scheduler(args.kubeconfig, config, stop)

    from controlplane.scheduler.runner import LeadershipLost

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(main())
        except LeadershipLost as err:
            logging.getLogger(__name__).error("%s; exiting", err)
            return 1
    return 0
