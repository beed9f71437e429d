"""A Job of N completions, P at a time, from its creation to Complete, against the floor of the same N
pods the bench runs itself, P at a time, pre-bound to the node, in the same run (issue 18; goal: at most
1.3x the floor).

  python bench/controllers/jobs.py [--completions 100] [--parallelism 10] [--rounds 3] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor: the bench creates P pods with the Job's pod template and spec.nodeName set, and one more each
         time a watch sees one Succeeded, until N have succeeded;
  job:   the bench creates a Job with that template, completions N and parallelism P (the Job
         controller creates the pods with its tracking finalizer, the scheduler binds them, the controller
         counts them through uncountedTerminatedPods); time until the Job's Complete condition, and until
         a pod watch saw N Succeeded. Also counted: store writes (pods, bindings, statuses, finalizer
         removals, Job status, events), the CPU of the controller manager and the API server, and
         `kubectl create --dry-run=server` of the manifest (bench/controllers/workload.py says why apart).
Floor and Job alternate; between them everything is deleted and gone. Figures are reported, never
asserted. `--smoke`: 10 completions, 3 at a time, 1 round.

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

NS = "bench-jobs"
NAME = "work"
PODS, JOBS = f"/api/v1/namespaces/{NS}/pods", f"/apis/batch/v1/namespaces/{NS}/jobs"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["true"]}
        ],
    }


def job(completions: int, parallelism: int, image: str, name: str = NAME) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {"spec": pod_spec(image)},
        },
    }


def succeeded(w: wl.Window) -> int:
    pods = w.watch["pods"].objects.values()
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")


async def floor_round(client: KubeClient, n: int, p: int, node: str, image: str, tag: str) -> Obj:
    made = 0

    async def create(count: int) -> None:
        nonlocal made
        names = [f"floor-{tag}-{made + i}" for i in range(count)]
        made += count
        await asyncio.gather(
            *(
                client.create(
                    PODS,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name},
                        "spec": {**pod_spec(image), "nodeName": node},
                    },
                )
                for name in names
            )
        )

    async with wl.Window(client, {"pods": PODS}) as w:
        await create(min(p, n))
        seconds = 0.0
        while succeeded(w) < n:
            # one new pod for each that finished, as the Job controller does
            seconds = await w.until(lambda: succeeded(w) >= n or (made < n and made - succeeded(w) < p))
            if made < n and made - succeeded(w) < p:
                await create(min(p - (made - succeeded(w)), n - made))
        return {"seconds": round(seconds, 3), **await w.costs()}


async def job_round(
    client: KubeClient, kubeconfig: Path, n: int, p: int, image: str, procs: dict[str, int], via: wl.Via
) -> Obj:
    async with wl.Window(client, {"pods": PODS, "jobs": JOBS}, procs) as w:
        await wl.send(client, kubeconfig, via, JOBS, job(n, p, image))
        pods_done = await w.until(lambda: succeeded(w) >= n)

        def complete() -> bool:
            conditions = ((w.watch["jobs"].objects.get(NAME) or {}).get("status") or {}).get("conditions")
            return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions or [])

        seconds = await w.until(complete)
        costs = await w.costs(settle=3)
        changes = w.watch["jobs"].changes
    return {
        "seconds": round(seconds, 3),
        "pods_succeeded_seconds": round(pods_done, 3),
        "kubectl_seconds": await wl.kubectl_seconds(kubeconfig, job(n, p, image, "dry-run")),
        "job_changes": changes,
        **costs,
    }


async def bench(stack: Stack, completions: int, parallelism: int, rounds: int) -> Obj:
    client, image = await wl.prepare(stack, NS)
    procs = {k: v for k, v in wl.component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    try:
        report = await wl.alternate(
            rounds,
            "job",
            lambda r: floor_round(client, completions, parallelism, stack.node_name, image, f"r{r}"),
            lambda via: job_round(client, stack.kubeconfig, completions, parallelism, image, procs, via),
            lambda: wl.delete_everything(client, NS, ["batch/v1/jobs"]),
        )
    finally:
        await client.close()
    return {"completions": completions, "parallelism": parallelism, **report}


def svg_plot(report: Obj) -> str:
    title = f"{report['completions']} completions, {report['parallelism']} at a time (s): the bench's own pods vs a Job"
    return wl.bars_svg(title, wl.round_bars(report, "job"))


def markdown(report: Obj) -> str:
    title = (
        f"A Job of {report['completions']} completions, {report['parallelism']} at a time, vs the same pods run "
        "by the bench"
    )
    columns: list[wl.Column] = [
        ("job pods succeeded s", lambda _f, j: j["pods_succeeded_seconds"]),
        ("Job changes", lambda _f, j: j["job_changes"]),
    ]
    return wl.report_markdown(report, title, "job", "Job", columns)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    completions, parallelism, rounds = (
        (10, 3, 1) if args.smoke else (args.completions, args.parallelism, args.rounds)
    )
    report = run_on_stack(lambda stack: bench(stack, completions, parallelism, rounds), tag="j")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-jobs", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
