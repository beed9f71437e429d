"""A Deployment of N replicas from its creation to N Ready pods, against the floor of N pods the
bench creates itself, pre-bound to the node, in the same run (issue 12; goal: at most 1.3x the floor).

  python bench/controllers/deployment.py [--replicas 100] [--rounds 2] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor:      N pods with the Deployment's pod template and spec.nodeName set, created at once through
              the API; time until a watch has seen all N Ready;
  deployment: the bench creates a Deployment with that template and N replicas (the controller
              creates the ReplicaSet, the ReplicaSet controller the pods, the scheduler binds them);
              time until a watch has seen all N Ready, and until the Deployment's status says N
              available. Also counted: the writes each phase cost the store (its revision moves once per
              write: pods, bindings, statuses, events, ReplicaSets) and how often the Deployment and its
              ReplicaSet objects changed, and the CPU of the controller manager, the API server and the
              agent, and `kubectl create --dry-run=server` of the manifest (both sides are sent by one
              client: bench/controllers/workload.py says why kubectl is timed apart). Floor and
              deployment alternate (the machine is shared, so the ratio is of
              neighbouring measurements); between them everything is deleted and gone.
Figures are reported, never asserted. `--smoke`: 10 replicas, 1 round (for CI).

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

NS = "bench-deploy"
APP = "web"
SERVE = "exec httpd -f -p 8080"
PODS = f"/api/v1/namespaces/{NS}/pods"
DEPLOYMENTS, REPLICASETS = (f"/apis/apps/v1/namespaces/{NS}/{r}" for r in ("deployments", "replicasets"))
Obj = dict[str, Any]


def template(image: str) -> Obj:
    return {
        "metadata": {"labels": {"app": APP}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SERVE],
                }
            ],
        },
    }


def floor_pod(name: str, node: str, image: str) -> Obj:
    t = template(image)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, **t["metadata"]},
        "spec": {**t["spec"], "nodeName": node},
    }


def deployment(replicas: int, image: str, name: str = APP) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": template(image),
        },
    }


def ready_count(w: wl.Window) -> int:
    return sum(1 for p in w.watch["pods"].objects.values() if wl.is_ready(p))


async def floor_round(client: KubeClient, n: int, node: str, image: str, tag: str) -> Obj:
    async with wl.Window(client, {"pods": PODS}) as w:
        await asyncio.gather(
            *(client.create(PODS, floor_pod(f"floor-{tag}-{i}", node, image)) for i in range(n))
        )
        sent = w.elapsed()
        seconds = await w.until(lambda: ready_count(w) >= n)
        return {"seconds": round(seconds, 3), "create_seconds": round(sent, 3), **await w.costs()}


async def deployment_round(
    client: KubeClient, kubeconfig: Path, n: int, image: str, procs: dict[str, int], via: wl.Via
) -> Obj:
    paths = {"pods": PODS, "deployments": DEPLOYMENTS, "replicasets": REPLICASETS}
    async with wl.Window(client, paths, procs) as w:
        await wl.send(client, kubeconfig, via, DEPLOYMENTS, deployment(n, image))
        seconds = await w.until(lambda: ready_count(w) >= n)

        def available() -> bool:  # the controller's own account of it
            st = (w.watch["deployments"].objects.get(APP) or {}).get("status") or {}
            return (
                st.get("availableReplicas") == n
                and st.get("updatedReplicas") == n
                and bool(st.get("observedGeneration"))
            )

        status_seconds = await w.until(available)
        costs = await w.costs(settle=3)
        changes = {name: w.watch[name].changes for name in ("deployments", "replicasets")}
    return {
        "seconds": round(seconds, 3),
        "status_available_seconds": round(status_seconds, 3),
        "kubectl_seconds": await wl.kubectl_seconds(kubeconfig, deployment(n, image, "dry-run")),
        "deployment_changes": changes["deployments"],
        "replicaset_changes": changes["replicasets"],
        **costs,
    }


async def bench(stack: Stack, replicas: int, rounds: int) -> Obj:
    client, image = await wl.prepare(stack, NS)
    procs = wl.component_pids(stack)
    try:
        report = await wl.alternate(
            rounds,
            "deployment",
            lambda r: floor_round(client, replicas, stack.node_name, image, f"r{r}"),
            lambda via: deployment_round(client, stack.kubeconfig, replicas, image, procs, via),
            lambda: wl.delete_everything(client, NS, ["apps/v1/deployments", "apps/v1/replicasets"]),
        )
    finally:
        await client.close()
    return {"replicas": replicas, "components": sorted(procs), **report}


def svg_plot(report: Obj) -> str:
    title = f"{report['replicas']} replicas to Ready (s): pre-bound pods vs a Deployment"
    return wl.bars_svg(title, wl.round_bars(report, "deployment", ("status", "status_available_seconds")))


def markdown(report: Obj) -> str:
    title = f"Deployment of {report['replicas']} replicas vs {report['replicas']} pre-bound pods"
    columns: list[wl.Column] = [
        ("status available s", lambda _f, d: d["status_available_seconds"]),
        ("Deployment changes", lambda _f, d: d["deployment_changes"]),
        ("ReplicaSet changes", lambda _f, d: d["replicaset_changes"]),
    ]
    return wl.report_markdown(report, title, "deployment", "deployment", columns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    replicas, rounds = (10, 1) if args.smoke else (args.replicas, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, replicas, rounds), tag="d")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-deployment", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
