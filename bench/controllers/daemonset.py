"""A DaemonSet rollout on N nodes of one machine, from its creation to one Ready pod on every node,
against the floor of the same N pods the bench creates itself, one per node with spec.nodeName set, in
the same run (issue 18; goal: at most 1.3x the floor).

  python bench/controllers/daemonset.py [--nodes 3] [--simulated-nodes 0] [--rounds 3] [--smoke] [--out DIR]
  python bench/controllers/daemonset.py --simulated-nodes 97     # 100 nodes: 3 real, 97 simulated

One multi-node stack (`pykubelet up --nodes N`'s: each node its own containerd and agent, joined by TLS
bootstrap, pod CIDRs from the node IPAM). The image is pulled on every node first. Each round:
  floor:     the bench creates N pods with the DaemonSet's pod template, each bound to one node;
  daemonset: the bench creates the DaemonSet (the controller creates one pod per node with its node
             affinity, the scheduler binds each, the controller counts them in its status); time until
             a pod watch saw N Ready pods, and until the DaemonSet's status says numberReady = N.
Both sides are sent by the same client (bench/controllers/workload.py says why kubectl is timed apart:
`kubectl create --dry-run=server` of the manifest, beside each round). Also counted: store writes and
the CPU of the controller manager and the API server. Floor and DaemonSet alternate; between them
everything is deleted and gone. Figures are reported, never asserted. `--smoke`: 2 nodes and 2
simulated ones, 1 round.

A DaemonSet's size is its number of nodes, and one machine runs a few real ones at most: with
`--simulated-nodes M`, `pykubelet simulate` keeps M more nodes beside the real ones for the whole run
(bench/controllers/workload.py's SimulatedNodes), and both sides cover every node, real and simulated.
A simulated node's pods run at once (no image pull, no container start behind them), so at that size
the figure is what the DaemonSet controller, the scheduler and the API server add to N pods' writes.

Each round runs the controller's phase twice, under the two definitions bench/controllers/workload.py
describes: sent by the bench's in-process client, and from a `kubectl apply -f` process's start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.controllers import workload as wl
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-daemonset"
NAME = "every"
PODS, SETS = f"/api/v1/namespaces/{NS}/pods", f"/apis/apps/v1/namespaces/{NS}/daemonsets"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "exec sleep 3600"],
            }
        ],
    }


def daemonset(image: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": pod_spec(image)},
        },
    }


def ready_count(w: wl.Window) -> int:
    return sum(1 for p in w.watch["pods"].objects.values() if wl.is_ready(p))


async def floor_round(client: KubeClient, nodes: list[str], image: str, tag: str) -> Obj:
    w, phases = wl.watched(client, {"pods": PODS})
    async with w:
        await asyncio.gather(
            *(
                client.create(
                    PODS,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": f"floor-{tag}-{i}", "labels": {"app": NAME}},
                        "spec": {**pod_spec(image), "nodeName": node},
                    },
                )
                for i, node in enumerate(nodes)
            )
        )
        seconds = await w.until(lambda: ready_count(w) >= len(nodes))
        return {"seconds": round(seconds, 3), "last": phases.last(w.t0), **await w.costs()}


async def daemonset_round(
    client: KubeClient, kubeconfig: Path, nodes: list[str], image: str, procs: dict[str, int], via: wl.Via
) -> Obj:
    n = len(nodes)
    w, phases = wl.watched(client, {"pods": PODS, "sets": SETS}, procs)
    async with w:
        await wl.send(client, kubeconfig, via, SETS, daemonset(image))
        pods_ready = await w.until(lambda: ready_count(w) >= n)

        def counted() -> bool:
            status = (w.watch["sets"].objects.get(NAME) or {}).get("status") or {}
            return status.get("numberReady") == n and status.get("desiredNumberScheduled") == n

        status_seconds = await w.until(counted)
        placed = sorted((p.get("spec") or {}).get("nodeName", "") for p in w.watch["pods"].objects.values())
        costs = await w.costs(settle=3)
        changes = w.watch["sets"].changes
    if placed != sorted(nodes):
        raise RuntimeError(f"the DaemonSet's pods are on {placed}, not one on each of {nodes}")
    return {
        "seconds": round(pods_ready, 3),
        "status_seconds": round(status_seconds, 3),
        "last": phases.last(w.t0),
        "kubectl_seconds": await wl.kubectl_seconds(
            kubeconfig, {**daemonset(image), "metadata": {"name": "dry-run", "namespace": NS}}
        ),
        "daemonset_changes": changes,
        **costs,
    }


async def bench(stack: Stack, rounds: int, simulated: int) -> Obj:
    client, image = await wl.prepare(stack, NS)
    procs = {k: v for k, v in wl.component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    log = stack.config.state_dir / "simulate.log"
    try:
        async with wl.SimulatedNodes(client, stack.kubeconfig, simulated, log) as sim:
            nodes = [*stack.node_names, *sim.names]
            if sim.proc is not None:
                procs["simulator"] = sim.proc.pid
            report = await wl.alternate(
                rounds,
                "daemonset",
                lambda r: floor_round(client, nodes, image, f"r{r}"),
                lambda via: daemonset_round(client, stack.kubeconfig, nodes, image, procs, via),
                lambda: wl.delete_everything(client, NS, ["apps/v1/daemonsets"]),
            )
    finally:
        await client.close()
    return {"nodes": len(nodes), "real_nodes": len(nodes) - simulated, "simulated_nodes": simulated, **report}


def nodes_text(report: Obj) -> str:
    """`3 nodes of one machine`, or `100 nodes (3 of one machine, 97 simulated)`."""
    simulated = report.get("simulated_nodes") or 0
    if not simulated:
        return f"{report['nodes']} nodes of one machine"
    return f"{report['nodes']} nodes ({report['real_nodes']} of one machine, {simulated} simulated)"


def svg_plot(report: Obj) -> str:
    title = f"one pod on each of {nodes_text(report)} (s): the bench's own pods vs a DaemonSet"
    return wl.bars_svg(title, wl.round_bars(report, "daemonset"))


def markdown(report: Obj) -> str:
    title = f"A DaemonSet on {nodes_text(report)} vs the same pods created by the bench"
    columns: list[wl.Column] = [
        ("status numberReady s", lambda _f, d: d["status_seconds"]),
        ("last created/bound floor s", lambda f, _d: f"{f['last']['created']}/{f['last']['bound']}"),
        ("last created/bound daemonset s", lambda _f, d: f"{d['last']['created']}/{d['last']['bound']}"),
        ("DaemonSet changes", lambda _f, d: d["daemonset_changes"]),
    ]
    return wl.report_markdown(report, title, "daemonset", "DaemonSet", columns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--simulated-nodes", type=int, default=0, help="simulated nodes beside the real ones")
    parser.add_argument("--rounds", type=int, default=3)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    nodes, simulated, rounds = (2, 2, 1) if args.smoke else (args.nodes, args.simulated_nodes, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, rounds, simulated), tag="d", node_name="bn", nodes=nodes)
    text = markdown(report)
    print(text)
    name = "controllers-daemonset" + (f"-{nodes + simulated}" if simulated and not args.smoke else "")
    write_report(out, name, report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
