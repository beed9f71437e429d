"""An OrderedReady StatefulSet of N replicas, from its creation to N Ready, against the floor of the same
N pods the bench makes itself in the same order (each one once the one before is Ready), pre-bound to the
node, in the same run (issue 18; goal: at most 1.3x the floor).

  python bench/controllers/statefulset.py [--replicas 20] [--rounds 3] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor: the bench creates pod `floor-<r>-0` with the set's pod template, spec.nodeName, hostname and
         subdomain, and the next one each time a watch sees the newest Ready, until N are Ready;
  set:   the bench creates a StatefulSet with that template and N replicas (the controller creates
         web-0, waits for it to be Running and Ready, then web-1, ...; the scheduler binds each); time
         until a pod watch saw N Ready, and until the set's status said readyReplicas N. Also counted:
         store writes, the CPU of the controller manager and the API server, and `kubectl create
         --dry-run=server` of the manifest (bench/controllers/workload.py says why apart).
Floor and set alternate; between them everything is deleted and gone. Figures are reported, never
asserted. `--smoke`: 3 replicas, 1 round.

Each round runs the controller's phase twice, under the two definitions bench/controllers/workload.py
describes: sent by the bench's in-process client, and from a `kubectl apply -f` process's start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.controllers import workload as wl
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-statefulset"
NAME = "web"
PODS, SETS = f"/api/v1/namespaces/{NS}/pods", f"/apis/apps/v1/namespaces/{NS}/statefulsets"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}
        ],
    }


def statefulset(replicas: int, image: str, name: str = NAME) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": NAME,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec(image)},
        },
    }


def ready_count(w: wl.Window) -> int:
    pods = w.watch["pods"].objects.values()
    return sum(1 for p in pods if wl.is_ready(p) and not p["metadata"].get("deletionTimestamp"))


async def floor_round(client: KubeClient, n: int, node: str, image: str, tag: str) -> Obj:
    w, phases = wl.watched(client, {"pods": PODS})
    async with w:
        for ordinal in range(n):
            name = f"floor-{tag}-{ordinal}"
            spec = {**pod_spec(image), "nodeName": node, "hostname": name, "subdomain": NAME}
            await client.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "labels": {"app": "floor"}},
                    "spec": spec,
                },
            )
            seconds = await w.until(lambda name=name: wl.is_ready(w.watch["pods"].objects.get(name) or {}))
        return {
            "seconds": round(seconds, 3),
            **await w.costs(),
            "per_pod": phases.medians([f"floor-{tag}-{i}" for i in range(n)]),
        }


async def set_round(
    client: KubeClient, kubeconfig: Path, n: int, image: str, procs: dict[str, int], via: wl.Via
) -> Obj:
    w, phases = wl.watched(client, {"pods": PODS, "sets": SETS}, procs)
    async with w:
        await wl.send(client, kubeconfig, via, SETS, statefulset(n, image))
        pods_ready = await w.until(lambda: ready_count(w) >= n)
        status_seconds = await w.until(
            lambda: (
                ((w.watch["sets"].objects.get(NAME) or {}).get("status") or {}).get("readyReplicas", 0) >= n
            )
        )
        costs = await w.costs(settle=3)
        changes = w.watch["sets"].changes
    return {
        "seconds": round(pods_ready, 3),
        "status_seconds": round(status_seconds, 3),
        "kubectl_seconds": await wl.kubectl_seconds(kubeconfig, statefulset(n, image, "dry-run")),
        "set_changes": changes,
        "per_pod": phases.medians([f"{NAME}-{i}" for i in range(n)]),
        **costs,
    }


async def bench(stack: Stack, replicas: int, rounds: int) -> Obj:
    client, image = await wl.prepare(stack, NS)
    procs = {k: v for k, v in wl.component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    try:
        report = await wl.alternate(
            rounds,
            "statefulset",
            lambda r: floor_round(client, replicas, stack.node_name, image, f"r{r}"),
            lambda via: set_round(client, stack.kubeconfig, replicas, image, procs, via),
            lambda: wl.delete_everything(
                client, NS, ["apps/v1/statefulsets"], also=("apps/v1/controllerrevisions",)
            ),
        )
    finally:
        await client.close()
    return {"replicas": replicas, **report}


def svg_plot(report: Obj) -> str:
    title = f"{report['replicas']} pods in order (s): the bench's own pods vs an OrderedReady StatefulSet"
    return wl.bars_svg(title, wl.round_bars(report, "statefulset"))


def markdown(report: Obj) -> str:
    title = f"An OrderedReady StatefulSet of {report['replicas']} vs the same pods made in order by the bench"

    def per_pod(phase: Obj, *keys: str) -> str:
        return ", ".join(str(phase["per_pod"][k]) for k in keys)

    columns: list[wl.Column] = [
        ("set status s", lambda _f, s: s["status_seconds"]),
        ("set changes", lambda _f, s: s["set_changes"]),
        (
            "per pod floor: ready->next, bound->ready",
            lambda f, _s: per_pod(f, "ready_to_next_created", "bound_to_ready"),
        ),
        (
            "per pod set: ready->next, created->bound, bound->ready",
            lambda _f, s: per_pod(s, "ready_to_next_created", "created_to_bound", "bound_to_ready"),
        ),
    ]
    return wl.report_markdown(report, title, "statefulset", "StatefulSet", columns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    replicas, rounds = (3, 1) if args.smoke else (args.replicas, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, replicas, rounds), tag="s")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-statefulset", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
