"""`pykubelet scheduler`: run the scheduler against any API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from kubeclient.eventloop import loop_factory, termination_event

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
        help="hold the kube-system/kube-scheduler Lease before scheduling (default: on, or "
        "the config file's leaderElection.leaderElect)",
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
    parser.add_argument("-v", "--verbose", action="store_true")


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
        await run_scheduler(args.kubeconfig, config, stop, serving_options(args))

    from controlplane.scheduler.runner import LeadershipLost

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        try:
            runner.run(main())
        except LeadershipLost as err:
            logging.getLogger(__name__).error("%s; exiting", err)
            return 1
    return 0
