"""`pykubelet scheduler`: run the scheduler against any API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kubeclient.eventloop import loop_factory, termination_event
from kubeclient.flags import go_duration
from kubeclient.orphan import exit_if_orphaned, watch_parent

# kube-scheduler's leader election flags: given, each overrides the config file's leaderElection field.
LEADER_ELECTION_FLAGS = (
    (
        "lease_duration",
        "--leader-elect-lease-duration",
        "15s",
        "how long a non-leader waits before taking over",
    ),
    (
        "renew_deadline",
        "--leader-elect-renew-deadline",
        "10s",
        "how long the leader retries renewing before giving up",
    ),
    (
        "retry_period",
        "--leader-elect-retry-period",
        "2s",
        "how long clients wait between tries to acquire or renew",
    ),
)

if TYPE_CHECKING:
    from kubeclient.secureport import SecureServingOptions


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
        help="hold the kube-system/kube-scheduler Lease before scheduling (default: true, or "
        "the config file's leaderElection.leaderElect)",
    )
    for attr, flag, default, text in LEADER_ELECTION_FLAGS:
        parser.add_argument(
            flag,
            dest=attr,
            type=go_duration,
            default=None,
            help=f"{text} (default: the config file's, else {default})",
        )
    # The secure port and its delegated authentication (upstream's SecureServing and Authentication
    # options); --secure-port=0 serves nothing.
    parser.add_argument(
        "--secure-port", type=int, default=10259, help="HTTPS port of /healthz, /livez, /readyz, /metrics"
    )
    parser.add_argument("--bind-address", default="0.0.0.0", help="address of the secure port")
    parser.add_argument(
        "--cert-dir", type=Path, default=None, help="where the self-signed certificate is kept"
    )
    parser.add_argument("--tls-cert-file", type=Path, default=None, help="serving certificate (PEM)")
    parser.add_argument("--tls-private-key-file", type=Path, default=None, help="key of --tls-cert-file")
    parser.add_argument(
        "--client-ca-file", type=Path, default=None, help="CA of client certificates (default: the cluster's)"
    )
    parser.add_argument("--requestheader-client-ca-file", type=Path, default=None, help="front-proxy CA")
    parser.add_argument("--requestheader-allowed-names", default="", help="front-proxy client names")


def serving_options(args: argparse.Namespace) -> SecureServingOptions:
    from kubeclient.secureport import SecureServingOptions

    return SecureServingOptions(
        args.secure_port,
        args.bind_address,
        args.cert_dir,
        args.tls_cert_file,
        args.tls_private_key_file,
        args.client_ca_file,
        args.requestheader_client_ca_file,
        args.requestheader_allowed_names,
    )


def run(args: argparse.Namespace) -> int:
    exit_if_orphaned("scheduler")
    watch_parent("scheduler")
    from controlplane.scheduler.config import load_config
    from controlplane.scheduler.runner import run_scheduler

    config = load_config(args.config)
    if args.leader_elect is not None:
        config.leader_election.enabled = args.leader_elect
    for attr, _, _, _ in LEADER_ELECTION_FLAGS:
        if getattr(args, attr) is not None:
            setattr(config.leader_election, attr, getattr(args, attr))
    le = config.leader_election
    if le.enabled and not le.lease_duration > le.renew_deadline > le.retry_period > 0:
        print(
            "pykubelet scheduler: leaderElection needs leaseDuration > renewDeadline > retryPeriod > 0",
            file=sys.stderr,
        )
        return 2

    async def main() -> None:
        stop = termination_event()
        await run_scheduler(args.kubeconfig, config, stop, serving_options(args))

    from controlplane.scheduler.runner import LeadershipLost

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(main())
        except LeadershipLost as err:
            logging.getLogger(__name__).error("%s; exiting", err)
            return 1
    return 0
