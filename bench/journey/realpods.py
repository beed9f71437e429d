"""trace and diagnose of a 100-replica Deployment with real pods (issue 36), beside timing.py's definition
(the objects written by that bench against an API server alone), which stays as it was.

  python bench/journey/realpods.py [--replicas 100] [--rounds 5]
  python bench/journey/realpods.py --smoke --out DIR     # 5 replicas, 2 rounds

One stack (pykubelet.rig.onstack: registry, containerd, the API server with its audit log, scheduler,
controller manager, agent, service proxy, DNS). The image is pulled first; then `kubectl apply -f` of a
Deployment `web` of N replicas (busybox serving HTTP on 8080) and a Service `web` in front of it,
`kubectl rollout status` until every replica is available, and a watch until the Service's
EndpointSlices hold N ready endpoints. Then, each round, as a user runs them (subprocesses, interpreter
start included; the baseline is `pykubelet version`), against the stack's admin kubeconfig, beside which
the stack keeps its audit log (so trace reads every write from it, as on `pykubelet up`'s stack):
  - `pykubelet trace deployment/web` (the text a user reads),
  - `pykubelet diagnose deployment/web` (with its dataplane probe: `nc` through pods/exec in a pod),
  - `pykubelet diagnose deployment/web --no-dataplane`,
each CLI process's CPU seconds beside its wall time (`*_cpu`: on a loaded machine the wall time is
mostly waiting for a core), and the same reads and the timeline / the verdict in this process
(`*_inproc`, the audit log included).
Medians of the rounds; goal < 2 s for trace. Writes journey-pods.{json,md,svg}. Figures are reported,
never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.controllers import deployment as deployment_bench
from bench.controllers import workload as wl
from bench.journey.timing import cli, in_process
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from journey.auditlog import find_stack_log
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NAME = "journey-pods"
NS = "bench-trace"
APP = "web"
SLICES = f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"
READY_BOUND = 600.0  # seconds for the rollout and the endpoints, on a loaded machine
Obj = dict[str, Any]


@dataclass(frozen=True)
class Size:
    replicas: int = 100
    rounds: int = 5


SMOKE = Size(replicas=5, rounds=2)


def manifest(replicas: int, image: str) -> list[Obj]:
    """The Deployment bench's Deployment (busybox serving HTTP on 8080), here, and a Service before it."""
    deployment = deployment_bench.deployment(replicas, image, APP)
    deployment["metadata"]["namespace"] = NS
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": APP, "namespace": NS},
        "spec": {"selector": {"app": deployment_bench.APP}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    return [deployment, service]


def kubectl(kubeconfig: Path, *args: str) -> None:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=READY_BOUND + 60,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")


def ready_endpoints(slices: dict[str, Obj]) -> int:
    return sum(
        1
        for s in slices.values()
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready")
    )


async def roll_out(stack: Stack, replicas: int) -> float:
    """The image pulled, the manifest applied with kubectl, every replica Ready and behind the Service:
    the seconds from the apply to the last of them."""
    client, image = await wl.prepare(stack, NS)
    try:
        path = Path(tempfile.mkstemp(suffix=".json", prefix="bench-trace-")[1])
        try:
            path.write_text(
                json.dumps({"apiVersion": "v1", "kind": "List", "items": manifest(replicas, image)})
            )
            start = time.monotonic()
            await asyncio.to_thread(kubectl, stack.kubeconfig, "apply", "-f", str(path))
        finally:
            path.unlink()
        await asyncio.to_thread(
            kubectl,
            stack.kubeconfig,
            "rollout",
            "status",
            f"deployment/{APP}",
            "-n",
            NS,
            f"--timeout={READY_BOUND:.0f}s",
        )
        await wl.watch_until(
            client,
            SLICES,
            {"labelSelector": f"kubernetes.io/service-name={APP}"},
            lambda slices: ready_endpoints(slices) >= replicas,
            READY_BOUND,
        )
        return time.monotonic() - start
    finally:
        await client.close()


async def measure(stack: Stack, size: Size) -> Obj:
    kubeconfig = stack.kubeconfig
    log = find_stack_log(str(kubeconfig))
    runs = {
        "baseline_version_cli": (None, ("version",)),
        "trace_cli": (kubeconfig, ("trace", f"deployment/{APP}")),
        "diagnose_cli": (kubeconfig, ("diagnose", f"deployment/{APP}")),
        "diagnose_no_dataplane_cli": (kubeconfig, ("diagnose", f"deployment/{APP}", "--no-dataplane")),
    }
    figures: dict[str, list[float]] = {
        **{key: [] for key in runs},
        "trace_inproc": [],
        "diagnose_inproc": [],
        **{f"{key}_cpu": [] for key in runs},
    }
    load_before = os.getloadavg()[0]
    for _ in range(size.rounds):
        for key, (config, argv) in runs.items():
            seconds, cpu, done = await user_runs(config, *argv)
            if done.returncode not in ((1,) if argv[0] == "diagnose" else ()) + (0,):  # 1: stalled
                raise RuntimeError(f"pykubelet {' '.join(argv)} exited {done.returncode}: {done.stderr}")
            figures[key].append(seconds)
            figures[f"{key}_cpu"].append(cpu)
        t_trace, t_diag, _, _ = await in_process(kubeconfig, NS, log)
        figures["trace_inproc"].append(t_trace)
        figures["diagnose_inproc"].append(t_diag)
    _, traced = await asyncio.to_thread(cli, kubeconfig, "trace", f"deployment/{APP}", namespace=NS)
    steps = json.loads(traced.stdout)["steps"]
    _, diagnosed = await asyncio.to_thread(cli, kubeconfig, "diagnose", f"deployment/{APP}", namespace=NS)
    return {
        "figures": figures,
        "steps": len(steps),
        "exact_steps": sum(1 for s in steps if s["exact"]),
        "diagnose_summary": json.loads(diagnosed.stdout)["summary"],
        "diagnose_exit": diagnosed.returncode,
        "audit_log_bytes": log.stat().st_size if log else 0,
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


async def bench(stack: Stack, size: Size) -> Obj:
    rollout_s = await roll_out(stack, size.replicas)
    return {"rollout_s": round(rollout_s, 3), **await measure(stack, size)}


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's ended children so far: a CLI run's own CPU is the
    difference around it, a figure the machine's load stretches far less than the wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def user_runs(kubeconfig: Path | None, *argv: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """`pykubelet ARGV` as a user runs it (text output): wall seconds, CPU seconds, the process."""
    before = children_cpu()
    seconds, done = await asyncio.to_thread(cli, kubeconfig, *argv, namespace=NS, as_json=False)
    return seconds, children_cpu() - before, done


def report(size: Size, run: Obj) -> tuple[Obj, str, str]:
    median = {k: round(statistics.median(v), 3) for k, v in run["figures"].items()}
    data = {
        "replicas": size.replicas,
        "rounds": size.rounds,
        "rollout_s": run["rollout_s"],
        "steps": run["steps"],
        "exact_steps": run["exact_steps"],
        "diagnose_status": run["diagnose_summary"],
        "diagnose_exit": run["diagnose_exit"],
        "audit_log_bytes": run["audit_log_bytes"],
        "load_average_before_after": run["load_average"],
        "median_s": median,
        "all_s": run["figures"],
        "goal_s": 2.0,
        "target": "one stack with real pods (containerd, agent, controllers, scheduler, audit log)",
    }
    md = [
        f"# trace and diagnose of a {size.replicas}-replica Deployment with real pods",
        "",
        f"One stack; the Deployment and its Service applied with kubectl, all {size.replicas} pods Ready "
        f"and behind the Service ({run['rollout_s']:.1f} s from the apply), then median of {size.rounds} "
        "rounds; goal < 2 s for trace. `*_cli` are subprocesses as a user runs them (interpreter start "
        "and imports included: the baseline is `pykubelet version`), reading the stack's audit log beside "
        "its kubeconfig; `*_inproc` the reads and the timeline / verdict alone; `*_cpu` the CPU seconds "
        "(user and system) of each CLI process, which the machine's load stretches far less than its wall "
        "time. `diagnose_cli` includes its dataplane probe (nc through pods/exec), `diagnose_no_dataplane_cli` "
        "leaves it out.",
        "",
        "| what | median (s) |",
        "| --- | --- |",
        *(f"| {k} | {v:.3f} |" for k, v in median.items()),
        "",
        f"trace printed {run['steps']} steps ({run['exact_steps']} exact, from an audit log of "
        f"{run['audit_log_bytes'] / 1e6:.1f} MB); diagnose said `{run['diagnose_summary']}` "
        f"(exit {run['diagnose_exit']}). Load average {run['load_average'][0]} before the rounds, "
        f"{run['load_average'][1]} after (2 cores).",
    ]
    svg = bar_svg(f"trace / diagnose, {size.replicas} real pods", list(median.items()), "s")
    return data, "\n".join(md), svg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=Size.replicas)
    parser.add_argument("--rounds", type=int, default=Size.rounds)
    add_run_options(parser)
    args = parser.parse_args()
    size = SMOKE if args.smoke else Size(args.replicas, args.rounds)
    out = out_dir(parser, args)
    run = run_on_stack(lambda stack: bench(stack, size), tag="j")
    data, md, svg = report(size, run)
    write_report(out, NAME, data, md, svg)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
