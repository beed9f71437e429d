"""Upstream's scheduler_perf workloads SchedulingPodAntiAffinity, SchedulingPodAffinity,
SchedulingPreferredPodAffinity, SchedulingPreferredPodAntiAffinity, SchedulingNodeAffinity,
MixedSchedulingBasePod, TopologySpreading and PreemptionBasic, at their 500-node sizes, through the
project's API server with agent-less nodes, beside upstream's CI thresholds.

As scheduler_perf: nodes (4 cpu, 32Gi, 110 pods; TopologySpreading's labelled with zones moon-1..3, the
affinity and node-affinity workloads' with zone1), the init pods scheduled first and not measured (each
createPods step waits for its pods, as upstream's), then the measured pods; pods/s = measured pods /
(last bound - first created), with the scheduler (`pykubelet scheduler`) running throughout. The pod
templates are upstream's (100m cpu, 500Mi each): required anti-affinity on kubernetes.io/hostname against
`color: green` in namespaces sched-test/sched-setup; required affinity on the zone to `color: blue`;
preferred (weight 1) hostname affinity to `color: red` and anti-affinity to `color: yellow`, those three
in namespaces sched-1/sched-0; required node affinity to zone1 or zone2; MixedSchedulingBasePod's 200 pods
of each of five kinds then plain pods; a DoNotSchedule zone spread with maxSkew 5 over `color: blue`; and
PreemptionBasic's four low-priority pods per node (900m each, terminationGracePeriodSeconds 0) then
high-priority pods (priority 10, 3 cpu) that each preempt three of them. Upstream's thresholds are set
for its 5000-node CI runs (60, 35, 90, 90, 220, 140, 460 pods/s); there is none at 500 nodes, so they
are shown as the reference (PreemptionBasic has none at all). The last columns time the decisions alone
(same plugins, preemption included, no API, CPU time): over every node, and searched as the scheduler
process searches (upstream's adaptive percentageOfNodesToScore: from 100 nodes on, the filters stop once
50% minus 1% per 125 nodes of them fit, at least 5% and 100, and only those are scored: 230 of 500, 500
of 5000), which is what the scheduler's CPU per pod includes. The CPU of this script's own process
(creating the measured pods, 32 at a time as before, and watching them bound) is reported per pod
beside the server's and the scheduler's: it shares the same cores.

Usage: python bench/scheduler/perf_workloads.py [--nodes 500] [--workload NAME ...] [--out DIR]
       python bench/scheduler/perf_workloads.py --nodes 5000 --init-pods 5000 --measure-pods 5000 \
           --workload TopologySpreading    # an upstream 5000-node size (5000Nodes_5000Pods)
       python bench/scheduler/perf_workloads.py --smoke --out DIR    # 10 nodes, a few pods
       ... --pyspy DIR    # py-spy of the API server and the scheduler in the measured phase (bench/pyspy.py)
Writes scheduler-perf-workloads.{json,md,svg} (default bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pyspy import Sampler
from bench.reporting import add_run_options, out_dir, write_report
from bench.scheduler.throughput import (
    CpuMeter,
    create_all,
    server_pid,
    start_scheduler,
    stop_process,
    wait_bound,
    wait_synced,
)
from controlplane.scheduler.algorithm import FitError, Search, schedule
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.plugins import build_scores
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.preemption import preempt
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer

ZONE = "topology.kubernetes.io/zone"
HIGH_PRIORITY = "perf-high-priority"  # value 10


@dataclass(frozen=True)
class Workload:
    name: str
    init: tuple[tuple[str, int], ...]  # (pod kind, count), created and bound in this order
    measure_pods: int
    zones: tuple[str, ...]
    kind: str
    threshold: float  # upstream's CI threshold (its 5000-node workload), pods/s

    @property
    def init_pods(self) -> int:
        return sum(n for _, n in self.init)


ZONE1 = ("zone1",)  # upstream's labelNodePrepareStrategy for the affinity workloads
MIXED_INIT = tuple((k, 200) for k in ("default", "affinity", "anti", "preferred", "preferred-anti"))
# Sizes: each workload's 500Nodes entry; thresholds: its 5000-node entry's (upstream's
# test/integration/scheduler_perf/{affinity,misc,topology_spreading}/performance-config.yaml).
WORKLOADS = (
    Workload("SchedulingPodAntiAffinity", (("anti", 100),), 400, (), "anti", 60),
    Workload("SchedulingPodAffinity", (("affinity", 500),), 1000, ZONE1, "affinity", 35),
    Workload("SchedulingPreferredPodAffinity", (("preferred", 500),), 1000, (), "preferred", 90),
    Workload(
        "SchedulingPreferredPodAntiAffinity", (("preferred-anti", 500),), 1000, (), "preferred-anti", 90
    ),
    Workload("SchedulingNodeAffinity", (("node-affinity", 500),), 1000, ZONE1, "node-affinity", 220),
    Workload("MixedSchedulingBasePod", MIXED_INIT, 1000, ZONE1, "default", 140),
    Workload("TopologySpreading", (("default", 1000),), 1000, ("moon-1", "moon-2", "moon-3"), "spread", 460),
    Workload("PreemptionBasic", (("low", 2000),), 500, (), "high", 0),
)


def node(i: int, zones: tuple[str, ...]) -> dict:
    """upstream's node-default.yaml: 4 cpu, 32Gi, 110 pods."""
    alloc = {"cpu": "4", "memory": "32Gi", "pods": "110"}
    labels = {"kubernetes.io/hostname": f"perf-node-{i:04d}"}
    if zones:
        labels[ZONE] = zones[i % len(zones)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"perf-node-{i:04d}", "labels": labels},
        "status": {"capacity": alloc, "allocatable": alloc},
    }


def pod(name: str, kind: str) -> dict:
    cpu = {"low": "900m", "high": "3000m"}.get(kind, "100m")
    requests = {"cpu": cpu, "memory": "500Mi"}
    spec: dict = {
        "containers": [
            {
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10",
                "ports": [{"containerPort": 80}],
                "resources": {"requests": requests, "limits": requests},
            }
        ]
    }
    labels: dict = {}
    namespaces = ["sched-1", "sched-0"]
    if kind == "affinity":
        labels = {"color": "blue"}
        term = {
            "labelSelector": {"matchLabels": {"color": "blue"}},
            "topologyKey": ZONE,
            "namespaces": namespaces,
        }
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    elif kind in ("preferred", "preferred-anti"):
        colour, key = ("red", "podAffinity") if kind == "preferred" else ("yellow", "podAntiAffinity")
        labels = {"color": colour}
        term = {
            "labelSelector": {"matchLabels": {"color": colour}},
            "topologyKey": "kubernetes.io/hostname",
            "namespaces": namespaces,
        }
        spec["affinity"] = {
            key: {"preferredDuringSchedulingIgnoredDuringExecution": [{"podAffinityTerm": term, "weight": 1}]}
        }
    elif kind == "node-affinity":
        expr = {"key": ZONE, "operator": "In", "values": ["zone1", "zone2"]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                }
            }
        }
    elif kind == "anti":
        labels = {"color": "green"}
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"color": "green"}},
                        "topologyKey": "kubernetes.io/hostname",
                        "namespaces": ["sched-test", "sched-setup"],
                    }
                ]
            }
        }
    elif kind == "low":
        spec["terminationGracePeriodSeconds"] = 0
    elif kind == "high":  # upstream's template sets priority 10; the Priority admission wants a class
        spec["priorityClassName"] = HIGH_PRIORITY
    elif kind == "spread":
        labels = {"color": "blue"}
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 5,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"color": "blue"}},
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


async def run_workload(
    server: ApiServer, work: Path, w: Workload, nodes: int, pyspy: Path | None = None, shared: bool = False
) -> dict:
    client = KubeClient(load_kubeconfig(server.kubeconfig), qps=0, max_connections=64)
    try:
        await create_all(client, "/api/v1/nodes", [node(i, w.zones) for i in range(nodes)])
        for ns in ("sched-0", "sched-1"):
            await create_missing(client, "/api/v1/namespaces", {"metadata": {"name": ns}})
        if w.kind == "high":
            await create_missing(
                client,
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": HIGH_PRIORITY}, "value": 10},
            )
        log = work / f"scheduler-{w.name}.log"
        sched = start_scheduler(server.scheduler_kubeconfig, log)
        try:
            await wait_synced(log)
            created = 0
            for kind, count in w.init:  # as scheduler_perf: each createPods op waits for its pods
                init = [pod(f"init-{kind}-{i:05d}", kind) for i in range(count)]
                await create_all(client, "/api/v1/namespaces/sched-0/pods", init)
                created += count
                await wait_bound(client, "sched-0", created, 600)
            waiter = asyncio.create_task(wait_bound(client, "sched-1", w.measure_pods, 600))
            await asyncio.sleep(0.2)  # the watch is open before the first create
            pids = {"server": server_pid(server), "scheduler": sched.pid}
            meter = CpuMeter(**pids).start()
            own = CpuMeter(bench=os.getpid()).start()
            samplers = (
                {n: Sampler(pid, pyspy / f"{w.name}-{nodes}-{n}.txt") for n, pid in pids.items()}
                if pyspy
                else {}
            )
            first = time.monotonic()
            measured = [pod(f"m-{i:05d}", w.kind) for i in range(w.measure_pods)]
            create_seconds = await create_all(client, "/api/v1/namespaces/sched-1/pods", measured)
            last, per_node = await waiter
            cpu = meter.stop()
            bench_cpu = own.stop()["bench"]
            profile = {n: s.stop() for n, s in samplers.items()}
        finally:
            stop_process(sched)
        if shared:  # a server of its own is thrown away with everything in it (at 5000 nodes the
            await clear(client)  # deletion of 15 000 pods outlasts the client's timeout)
    finally:
        await client.close()
    seconds = last - first
    return {
        "workload": w.name,
        "nodes": nodes,
        "init_pods": w.init_pods,
        "measure_pods": w.measure_pods,
        "seconds": seconds,
        "pods_per_second": w.measure_pods / seconds,
        "create_per_second": w.measure_pods / create_seconds,
        "threshold": w.threshold,
        "cpu": cpu,
        "bench_cpu": bench_cpu,
        "nodes_used": len(per_node),
        "decisions_per_second": decisions_only(w, nodes),
        "searched_decisions_per_second": decisions_only(w, nodes, searched=True),
        **({"pyspy": profile} if profile else {}),
    }


async def create_missing(client: KubeClient, path: str, body: dict) -> None:
    try:
        await client.create(path, body)
    except ApiError as err:
        if err.status != 409:
            raise


async def clear(client: KubeClient) -> None:
    """Leave the server empty for the next workload (the smoke run shares one server)."""
    for ns in ("sched-0", "sched-1"):
        await client.delete(f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
    await client.delete("/api/v1/nodes")


def decisions_only(w: Workload, nodes: int, searched: bool = False) -> float:
    """The same workload through the scheduler's pure decision path: CPU time, no API. Every node is
    filtered and scored, unless `searched`: then only as many as the scheduler process looks at
    (percentageOfNodesToScore's adaptive default, the search resuming where the last one stopped)."""
    cache = SchedulerCache()
    for i in range(nodes):
        cache.set_node(node(i, w.zones))
    filters, scores, rng = default_filters(), build_scores(SchedulerConfig()), random.Random(0)
    search = Search() if searched else None

    def place(body: dict, ns: str, uid: str) -> None:
        body["metadata"].update(namespace=ns, uid=uid)
        if body["spec"].get("priorityClassName") == HIGH_PRIORITY:
            body["spec"]["priority"] = 10  # what the API server's Priority admission writes
        info = pod_info(body)
        view = cache.cluster_view()
        now = view.all_nodes
        try:
            chosen = schedule(info, now, filters, scores, view, rng, search)
        except FitError as err:  # PreemptionBasic: evict, then the next attempt fits
            outcome = preempt(info, err.reasons, filters, view)
            assert outcome.candidate is not None, outcome.message
            for victim in outcome.candidate.victims:
                cache.remove_pod(victim.uid)
            chosen = schedule(info, now, filters, scores, view, rng, search)
        cache.assume(info, chosen.name)

    for kind, count in w.init:
        for i in range(count):
            place(pod(f"init-{kind}-{i}", kind), "sched-0", f"i-{kind}-{i}")
    start = time.process_time()
    for i in range(w.measure_pods):
        place(pod(f"m-{i}", w.kind), "sched-1", f"m{i}")
    return w.measure_pods / (time.process_time() - start)


def report(results: list[dict]) -> str:
    lines = [
        "# Scheduler: upstream's scheduler_perf workloads",
        "",
        "| workload | nodes | init + measured pods | seconds | pods/s | upstream threshold (5000 nodes) "
        "| pod creation/s | CPU ms/pod: server + scheduler | CPU ms/pod: this script (creates, watches) "
        "| idle-machine estimate, pods/s | decisions alone, pods/s: every node, searched as the scheduler |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        cpu = " + ".join(f"{r['cpu'][k] * 1000 / r['measure_pods']:.2f}" for k in ("server", "scheduler"))
        lines.append(
            f"| {r['workload']} | {r['nodes']} | {r['init_pods']} + {r['measure_pods']} | {r['seconds']:.2f} "
            f"| {r['pods_per_second']:.0f} | {r['threshold'] or '-'} | {r['create_per_second']:.0f} | {cpu} "
            f"| {r['bench_cpu'] * 1000 / r['measure_pods']:.2f} "
            f"| {r['measure_pods'] / max(r['cpu'].values()):.0f} "
            f"| {r['decisions_per_second']:.0f}, {r['searched_decisions_per_second']:.0f} |"
        )
    lines += [
        "",
        "pods/s: measured pods / (last bound - first created), the scheduler running throughout, so pod "
        "creation (its own column, same run) bounds it. Upstream's thresholds are for its 5000-node "
        "runs on CI machines; upstream sets none at 500 nodes. The idle-machine estimate is measured pods "
        "/ CPU seconds of the busier process (each runs one event loop on its own core): on this shared, "
        "loaded machine the wall-clock figure mostly measures the other work.",
        "",
        f"Load average while running: {os.getloadavg()[0]:.1f} (2 cores, shared).",
    ]
    for r in results:
        for process, prof in r.get("pyspy", {}).items():
            lines += [
                "",
                f"py-spy, {r['workload']} at {r['nodes']} nodes, {process} ({prof['samples']} samples):",
            ]
            lines += [
                "",
                "| self % | function | | inclusive % | function |",
                "| --- | --- | --- | --- | --- |",
            ]
            for own, incl in zip(prof["self_pct"][:15], prof["inclusive_pct"][:15], strict=False):
                lines.append(f"| {own[1]} | `{own[0]}` | | {incl[1]} | `{incl[0]}` |")
    return "\n".join(lines) + "\n"


def svg_plot(results: list[dict]) -> str:
    width, bar_h, gap, left = 640, 28, 14, 230
    top = max(max(max(r["pods_per_second"], r["threshold"]) for r in results), 1) * 1.1
    height = len(results) * (bar_h + gap) + 50
    scale = (width - left - 40) / top
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<text x="10" y="18" font-size="14">scheduler_perf workloads, pods/s (line: upstream threshold)</text>',
    ]
    for i, r in enumerate(results):
        y = 34 + i * (bar_h + gap)
        w = r["pods_per_second"] * scale
        colour = "#4a7" if r["pods_per_second"] >= r["threshold"] else "#c84"
        tx = left + r["threshold"] * scale
        parts += [
            f'<text x="10" y="{y + bar_h * 0.65:.0f}">{r["workload"]}</text>',
            f'<rect x="{left}" y="{y}" width="{w:.0f}" height="{bar_h}" fill="{colour}"/>',
            f'<text x="{left + w + 4:.0f}" y="{y + bar_h * 0.65:.0f}">{r["pods_per_second"]:.0f}</text>',
            f'<line x1="{tx:.0f}" y1="{y - 3}" x2="{tx:.0f}" y2="{y + bar_h + 3}" stroke="#000"/>',
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def resized(w: Workload, init_pods: int | None, measure_pods: int | None) -> Workload:
    """Another of upstream's sizes of the workload: `init_pods` shared equally by its init kinds."""
    init = w.init
    if init_pods is not None:
        init = tuple((kind, init_pods // len(w.init)) for kind, _ in w.init)
    measure = w.measure_pods if measure_pods is None else measure_pods
    return Workload(w.name, init, measure, w.zones, w.kind, w.threshold)


async def main_async(args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-sched-perf-") as tmp:
        results = []
        shared = ApiServer(Path(tmp) / "shared") if args.smoke else None  # smoke: one server for all
        try:
            for w in WORKLOADS:
                if args.workload and w.name not in args.workload:
                    continue
                w = resized(w, args.init_pods, args.measure_pods)
                if args.smoke:  # PreemptionBasic keeps its four low pods per node, so each high one preempts
                    high = w.kind == "high"
                    small = tuple((k, 4 * args.nodes if high else 5) for k, _ in w.init)
                    w = Workload(w.name, small, args.nodes if high else 10, w.zones, w.kind, w.threshold)
                if shared is not None:
                    if not shared.running:
                        shared.start()
                    results.append(await run_workload(shared, Path(tmp), w, args.nodes, args.pyspy, True))
                    continue
                with ApiServer(Path(tmp) / w.name) as server:
                    results.append(await run_workload(server, Path(tmp), w, args.nodes, args.pyspy))
        finally:
            if shared is not None and shared.running:
                shared.stop()
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=None, help="default 500 (smoke: 10)")
    parser.add_argument(
        "--workload", action="append", choices=[w.name for w in WORKLOADS], help="only these (repeatable)"
    )
    parser.add_argument(
        "--init-pods", type=int, default=None, help="init pods instead of the 500-node size's"
    )
    parser.add_argument(
        "--measure-pods", type=int, default=None, help="measured pods instead of the 500-node size's"
    )
    parser.add_argument(
        "--pyspy",
        type=Path,
        default=None,
        help="sample the API server and the scheduler with py-spy during the measured phase: raw stacks "
        "into this folder, the top functions into the report (bench/pyspy.py)",
    )
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.pyspy:
        args.pyspy.mkdir(parents=True, exist_ok=True)
    args.nodes = args.nodes or (10 if args.smoke else 500)
    results = asyncio.run(main_async(args))
    text = report(results)
    write_report(out, "scheduler-perf-workloads", results, text, svg_plot(results))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
