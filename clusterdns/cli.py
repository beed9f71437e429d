"""`pykubelet dns`: the cluster DNS server against any API server."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from kubeclient.eventloop import run_component, termination_event

log = logging.getLogger("dns")


def upstreams(resolv_conf: Path, skip: set[str]) -> list[str]:
    """The host's nameservers (ours excluded, so a forwarded question never comes back to us)."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError:
        return []
    found = [line.split()[1] for line in lines if line.startswith("nameserver") and len(line.split()) > 1]
    return [ip for ip in found if ip not in skip]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig", type=Path, default=Path(default), help="kubeconfig with the server's identity"
    )
    parser.add_argument("--bind-address", default="0.0.0.0", help="address to answer on (UDP and TCP)")
    parser.add_argument("--port", type=int, default=53, help="port to answer on (UDP and TCP)")
    parser.add_argument("--cluster-domain", default="cluster.local", help="the zone answered from the API")
    parser.add_argument(
        "--resolv-conf", type=Path, default=Path("/etc/resolv.conf"), help="where the upstreams are"
    )
    # CoreDNS's health, ready and prometheus plugins, on their default ports ('' turns one off, port 0
    # takes a free one: several stacks on one host each get their own).
    parser.add_argument(
        "--health-bind-address", default="0.0.0.0:8080", help="host:port of /health (default 0.0.0.0:8080)"
    )
    parser.add_argument(
        "--ready-bind-address", default="0.0.0.0:8181", help="host:port of /ready (default 0.0.0.0:8181)"
    )
    parser.add_argument(
        "--metrics-bind-address", default="0.0.0.0:9153", help="host:port of /metrics (default 0.0.0.0:9153)"
    )


async def _main(args: argparse.Namespace) -> int:
    from clusterdns.endpoints import health_app, metrics_app, ready_app
    from clusterdns.metrics import DnsMetrics, server_label
    from clusterdns.server import Resolver, serve
    from clusterdns.watch import ClusterZone
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.httpserve import serve as serve_http
    from kubeclient.httpserve import split_address

    for flag in ("health_bind_address", "ready_bind_address", "metrics_bind_address"):
        value = getattr(args, flag)
        try:
            if value:
                split_address(value)
        except ValueError as err:
            log.error("--%s: %s", flag.replace("_", "-"), err)
            return 2
    client = KubeClient(load_kubeconfig(args.kubeconfig), component="coredns")
    zone = ClusterZone(client, args.cluster_domain)
    metrics = DnsMetrics(server_label(args.bind_address, args.port))
    runners = []
    try:
        for address, app, what in (
            (args.health_bind_address, health_app(), "health"),
            (args.ready_bind_address, ready_app(lambda: [] if zone.synced else ["kubernetes"]), "ready"),
            (args.metrics_bind_address, metrics_app(metrics), "metrics"),
        ):
            if address:
                runner, port = await serve_http(app, address)
                runners.append(runner)
                log.info("serving %s port=%d", what, port)
        await zone.start()
        resolver = Resolver(zone.zone, upstreams(args.resolv_conf, {args.bind_address}), metrics)
        servers = await serve(resolver, args.bind_address, args.port)
        log.info(
            "serving address=%s port=%d domain=%s upstreams=%s",
            args.bind_address,
            servers.port,
            args.cluster_domain,
            ",".join(resolver.upstreams) or "-",
        )
        stop = termination_event()
        try:
            await stop.wait()
        finally:
            await servers.close()
    finally:
        for runner in runners:
            await runner.cleanup()
        await zone.stop()
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from kubeclient.gctuning import tune_for_large_caches

    # The informers hold every Service and EndpointSlice of the cluster and the zone a record per name:
    # with the collector's defaults a full collection walked them all in the middle of the answers (a
    # 100 ms stall at 10 000 Services, bench/dns/distinct.py's p99).
    tune_for_large_caches()
    return run_component(_main(args))
