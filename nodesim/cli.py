"""`pykubelet simulate`: simulated nodes against any API server (ours or a genuine one)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from pathlib import Path

from kubeclient.eventloop import run_component, termination_event
from kubeclient.flags import go_duration

log = logging.getLogger("nodesim")


def _labels(text: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"invalid label {item!r}: want key=value")
        out[key] = value
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        action="append",
        default=None,
        help="kubeconfig to write with (default $KUBECONFIG's first file, else ~/.kube/config). Give it "
        "once per API server of an HA control plane to spread the nodes over them as a load balancer in "
        "front of the servers spreads kubelets: node i registers, renews its Lease, reports its status and "
        "watches and writes its pods through the (i mod K)-th of the K kubeconfigs; the request limits "
        "(--concurrency, --kube-api-qps, --kube-api-burst) stay the whole simulation's",
    )
    parser.add_argument("--nodes", type=int, default=1, help="how many nodes to simulate")
    parser.add_argument("--name-prefix", default="sim-", help="node names are PREFIX0, PREFIX1, ...")
    parser.add_argument("--node-labels", type=_labels, default={}, help="k=v,... labels on every node")
    parser.add_argument("--cpu", default="32", help="each node's cpu capacity")
    parser.add_argument("--memory", default="256Gi", help="each node's memory capacity")
    parser.add_argument("--max-pods", type=int, default=110, help="each node's pod capacity")
    parser.add_argument(
        "--start-delay", type=go_duration, default="1s", help="how long a bound pod takes to run"
    )
    parser.add_argument(
        "--job-duration", type=go_duration, default="1s", help="how long a Job's pod runs before it exits 0"
    )
    parser.add_argument(
        "--stage-file",
        type=Path,
        default=None,
        help="YAML of Stage objects: per pod selector, start delay, run time, exit code or phase",
    )
    parser.add_argument(
        "--node-lease-duration-seconds",
        type=int,
        default=40,
        help="the Lease duration (renewed every quarter)",
    )
    parser.add_argument(
        "--node-status-report-frequency", type=go_duration, default="5m", help="status report period"
    )
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight at most")
    parser.add_argument("--kube-api-qps", type=float, default=100.0, help="QPS toward the API server")
    parser.add_argument("--kube-api-burst", type=int, default=200, help="burst toward the API server")
    parser.add_argument(
        "--keep-nodes", action="store_true", help="leave the nodes and their pods when stopping"
    )


def kubeconfigs(given: list[Path] | None) -> list[Path]:
    """The --kubeconfig files in order, or the default one (what kubectl would read first)."""
    if given:
        return given
    default = os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")).split(os.pathsep)[0]
    return [Path(default)]


def run(args: argparse.Namespace) -> int:
    from kubeclient.client import KubeClient
    from kubeclient.config import load_kubeconfig
    from kubeclient.gctuning import tune_for_large_caches
    from nodesim.settings import SimSettings
    from nodesim.simulation import NotOurs, Simulation
    from nodesim.stagefile import StageFileError, load_stages

    if args.nodes < 1:
        print("error: --nodes must be at least 1")
        return 2
    try:
        found = load_stages(args.stage_file) if args.stage_file else ()
    except StageFileError as err:
        print(f"error: {err}")
        return 2
    settings = SimSettings(
        nodes=args.nodes,
        prefix=args.name_prefix,
        cpu=args.cpu,
        memory=args.memory,
        pods=args.max_pods,
        labels=args.node_labels,
        start_delay=args.start_delay,
        job_duration=args.job_duration,
        stages=found,
        lease_duration=args.node_lease_duration_seconds,
        status_report_frequency=args.node_status_report_frequency,
        concurrency=args.concurrency,
        keep_nodes=args.keep_nodes,
    )

    async def main() -> int:
        stop = termination_event()
        async with contextlib.AsyncExitStack() as stack:
            clients = []
            for path in kubeconfigs(args.kubeconfig):
                client = KubeClient(
                    load_kubeconfig(path),
                    qps=args.kube_api_qps,
                    burst=args.kube_api_burst,
                    component="nodesim",
                )
                clients.append(await stack.enter_async_context(client))
            for client in clients[1:]:  # one rate limit for the whole simulation, however many servers
                client.limiter = clients[0].limiter
            try:
                await Simulation(clients, settings).run(stop)
            except NotOurs as err:
                log.error("%s", err)
                return 1
        return 0

    tune_for_large_caches()  # the pod informer holds every scheduled pod of the cluster
    return run_component(main())
