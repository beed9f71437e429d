"""`pykubelet proxy`: the service proxy (kube-proxy's nftables mode) against any API server."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from pathlib import Path

from kubeclient.eventloop import run_component, termination_event
from kubeclient.flags import go_duration

log = logging.getLogger("proxy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig", type=Path, default=Path(default), help="kubeconfig with the proxy's identity"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file; flags given win over it, "
        "fields the proxy does not honour are refused",
    )
    parser.add_argument(
        "--kube-api-qps", type=float, default=5.0, help="QPS to use while talking with kubernetes apiserver"
    )
    parser.add_argument(
        "--kube-api-burst", type=int, default=10, help="burst to use while talking with kubernetes apiserver"
    )
    parser.add_argument("--hostname-override", default="", help="the node name (default: the host name)")
    parser.add_argument("--cleanup", action="store_true", help="remove the proxy's nftables table, then exit")
    parser.add_argument("--proxy-mode", default="nftables", choices=["nftables"], help="only nftables")
    parser.add_argument(
        "--cluster-cidr", default="", help="the pods' range: traffic from outside it is masqueraded"
    )
    parser.add_argument("--masquerade-all", action="store_true", help="masquerade all traffic to ClusterIPs")
    parser.add_argument(
        "--nodeport-addresses",
        default="",
        help="comma-separated CIDRs (or 'primary') whose local addresses accept NodePorts (default: primary)",
    )
    parser.add_argument(
        "--bind-address", default="0.0.0.0", help="the node's IP (default: the Node object's InternalIP)"
    )
    parser.add_argument(
        "--healthz-bind-address", default="0.0.0.0:10256", help="host:port of /healthz ('' : none)"
    )
    parser.add_argument(
        "--metrics-bind-address", default="127.0.0.1:10249", help="host:port of /metrics ('' : none)"
    )
    parser.add_argument(
        "--sync-period", type=go_duration, default="30s", help="the longest time between syncs"
    )
    parser.add_argument(
        "--min-sync-period",
        type=go_duration,
        default="1s",
        help="the shortest time between syncs (bursts of 2)",
    )
    # Not kube-proxy's: tests run the proxy on a table or in a network namespace of their own.
    parser.add_argument("--nft-table", default="kube-proxy", help=argparse.SUPPRESS)
    parser.add_argument("--netns", default="", help=argparse.SUPPRESS)
    # kube-proxy 1.32 learns the service ranges from ServiceCIDR objects, which this API server does not
    # serve; the rig passes its range here so unallocated ClusterIPs are dropped as upstream drops them.
    parser.add_argument("--service-cidrs", default="", help=argparse.SUPPRESS)


async def _main(args: argparse.Namespace) -> int:
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.httpserve import serve
    from serviceproxy.conntrack import Conntrack
    from serviceproxy.nft import Nft
    from serviceproxy.nodeaddrs import (
        NodePortAddressError,
        local_ipv4,
        node_ips,
        nodeport_ips,
        parse_nodeport_addresses,
    )
    from serviceproxy.proxier import Proxier, ProxyConfig
    from serviceproxy.server import healthz_app, metrics_app

    nft = Nft(args.nft_table, netns=args.netns)
    if args.cleanup:
        removed = await nft.delete_table()
        log.info("cleanup table=%s removed=%s", args.nft_table, removed)
        return 0
    try:
        nodeport_spec = parse_nodeport_addresses(args.nodeport_addresses)
    except NodePortAddressError as err:
        log.error("%s", err)
        return 2
    node = (args.hostname_override or socket.gethostname().split(".")[0]).lower()
    client = KubeClient(
        load_kubeconfig(args.kubeconfig),
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        component="kube-proxy",
    )
    ips = await node_ips(client, node, args.bind_address)
    nodeports = nodeport_ips(nodeport_spec, ips, await local_ipv4(args.netns))
    config = ProxyConfig(
        node_name=node,
        cluster_cidr=args.cluster_cidr,
        masquerade_all=args.masquerade_all,
        nodeport_ips=nodeports,
        node_ips=ips,
        service_cidrs=tuple(c.strip() for c in args.service_cidrs.split(",") if c.strip()),
        health_check_ips=nodeports,
        sync_period=args.sync_period,
        min_sync_period=args.min_sync_period,
        nft=nft,
        conntrack=Conntrack(args.netns),
    )
    proxier = Proxier(client, config)
    runners = []
    if args.healthz_bind_address:
        runner, port = await serve(healthz_app(proxier.health), args.healthz_bind_address)
        runners.append(runner)
        log.info("serving healthz port=%d", port)
    if args.metrics_bind_address:
        runner, port = await serve(metrics_app(proxier.metrics), args.metrics_bind_address)
        runners.append(runner)
        log.info("serving metrics port=%d", port)
    stop = termination_event()
    log.info(
        "starting node=%s table=%s cluster_cidr=%s node_ips=%s nodeport_ips=%s",
        node,
        args.nft_table,
        args.cluster_cidr or "-",
        ",".join(ips) or "-",
        "all" if nodeports is None else ",".join(nodeports) or "none",
    )
    try:
        await proxier.run(stop)
    finally:
        for runner in runners:
            await runner.cleanup()
        await client.close()
    return 0


def apply_config_file(args: argparse.Namespace) -> None:
    """The --config file's settings, under the flags given on the command line."""
    from serviceproxy.config import load

    changed = getattr(args, "_changed", frozenset())
    for dest, value in load(args.config).items():
        if dest not in changed:
            setattr(args, dest, Path(value) if dest == "kubeconfig" else value)


def run(args: argparse.Namespace) -> int:
    if args.config is not None:
        from kubeclient import logsetup
        from serviceproxy.config import ProxyConfigError

        try:
            apply_config_file(args)
        except ProxyConfigError as err:
            print(f"pykubelet proxy: --config {err}", file=sys.stderr)
            return 2
        logsetup.configure_from_args(args)  # the file may set logging.verbosity and logging.format
    return run_component(_main(args))
