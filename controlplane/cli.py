"""`pykubelet server`: run the project's own Kubernetes API server."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", required=True, type=Path, help="state, PKI and admin.kubeconfig live here")
    parser.add_argument("--port", type=int, default=6443, help="HTTPS port (0 picks a free one)")
    parser.add_argument("--bind-address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertise-address", default="", help="host written into admin.kubeconfig")
    parser.add_argument("--token-auth-file", type=Path, default=None, help="static tokens: token,user,uid,\"groups\"")
    parser.add_argument("--tls-san", action="append", default=[], help="extra name or IP for the serving cert")
    parser.add_argument("--watch-cache-size", type=int, default=10_000, help="events kept per resource for watch resume")
    parser.add_argument("--compact-interval", type=float, default=300.0, help="seconds between history compactions")
    parser.add_argument("--event-ttl", type=float, default=3600.0, help="seconds an idle event is kept")
    parser.add_argument(
        "--scheduler",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the scheduler as a child process (--no-scheduler: another scheduler binds pods)",
    )
    parser.add_argument("--scheduler-config", type=Path, default=None, help="KubeSchedulerConfiguration file")
    parser.add_argument("--insecure-http", action="store_true", help="serve plain HTTP (benchmarks only)")
    parser.add_argument("-v", "--verbose", action="store_true")


def run(args: argparse.Namespace) -> int:
    from controlplane.apiserver.server import ServerConfig, serve

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    config = ServerConfig(
        data_dir=args.data_dir,
        port=args.port,
        bind=args.bind_address,
        advertise=args.advertise_address,
        token_file=args.token_auth_file,
        insecure_http=args.insecure_http,
        watch_window=args.watch_cache_size,
        compact_interval=args.compact_interval,
        event_ttl=args.event_ttl,
        extra_sans=args.tls_san,
        scheduler=args.scheduler,
        scheduler_config=args.scheduler_config,
    )
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve(config))
    return 0


def _loop_factory():  # type: ignore[no-untyped-def]
    """uvloop when installed: it roughly halves the per-request cost of the HTTP layer."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
