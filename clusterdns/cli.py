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


async def _main(args: argparse.Namespace) -> int:
    from clusterdns.server import Resolver, serve
    from clusterdns.watch import ClusterZone
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig

    client = KubeClient(load_kubeconfig(args.kubeconfig), component="coredns")
    zone = ClusterZone(client, args.cluster_domain)
    await zone.start()
    resolver = Resolver(zone.zone, upstreams(args.resolv_conf, {args.bind_address}))
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
        await zone.stop()
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_component(_main(args))
