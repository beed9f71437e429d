"""`pykubelet netpolicy`: the network-policy agent of one host's nodes, against any API server."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from pathlib import Path

from kubeclient.eventloop import run_component, termination_event
from kubeclient.flags import go_duration
from netpolicy.rules import TABLE

log = logging.getLogger("netpolicy")
BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    parser.add_argument(
        "--kubeconfig", type=Path, default=Path(default), help="kubeconfig with the agent's identity"
    )
    parser.add_argument(
        "--node-name",
        action="append",
        default=[],
        help="a node whose pods this host carries (repeat for several; default: the host name)",
    )
    parser.add_argument("--nft-table", default=TABLE, help="the agent's nftables table (family inet)")
    parser.add_argument("--cleanup", action="store_true", help="remove the agent's nftables table, then exit")
    parser.add_argument(
        "--min-sync-period", type=go_duration, default="100ms", help="the shortest time between two syncs"
    )
    parser.add_argument("--kube-api-qps", type=float, default=5.0, help="QPS towards the API server")
    parser.add_argument("--kube-api-burst", type=int, default=10, help="burst towards the API server")
    # Not for users: tests run the agent inside a network namespace of their own.
    parser.add_argument("--netns", default="", help=argparse.SUPPRESS)


def _bridged_traffic_filtered(netns: str) -> None:
    """Pods of one bridge reach each other without routing: only br_netfilter shows that traffic to the
    inet forward hook. Turned on when it is off (kubeadm's preflight asks the same of every node)."""
    if netns or not BRIDGE_NF.exists():
        return
    if BRIDGE_NF.read_text().strip() != "1":
        BRIDGE_NF.write_text("1\n")
        log.info("set net.bridge.bridge-nf-call-iptables=1")


async def _main(args: argparse.Namespace) -> int:
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from netpolicy.agent import AgentConfig, PolicyAgent
    from netpolicy.nft import NftTable

    nft = NftTable(args.nft_table, netns=args.netns)
    if args.cleanup:
        removed = await nft.remove()
        log.info("cleanup table=%s removed=%s", args.nft_table, removed)
        return 0
    nodes = frozenset(n.lower() for n in args.node_name) or frozenset(
        {socket.gethostname().split(".")[0].lower()}
    )
    _bridged_traffic_filtered(args.netns)
    client = KubeClient(
        load_kubeconfig(args.kubeconfig),
        qps=args.kube_api_qps,
        burst=args.kube_api_burst,
        component="netpolicy",
    )
    agent = PolicyAgent(client, AgentConfig(nodes, min_sync_period=args.min_sync_period, nft=nft))
    stop = termination_event()
    log.info("starting nodes=%s table=inet %s", ",".join(sorted(nodes)), args.nft_table)
    try:
        await agent.run(stop)
    finally:
        await client.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return run_component(_main(args))
