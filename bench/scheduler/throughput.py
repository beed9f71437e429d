"""Scheduling throughput, end to end through the project's API server: N pods onto M nodes.

Three processes, as in a real cluster: the API server, the scheduler (`pykubelet scheduler`), and this
script, which creates Node objects and pods and watches until every pod has spec.nodeName.

Three scenarios:
- backlog: all pods exist before the scheduler starts; rate = pods / (last bound - scheduler ready).
- stream: the scheduler is running; pods are created as fast as the server takes them;
  rate = pods / (last bound - first create). This one is capped by pod creation itself, so the
  creation rate is printed beside it as the baseline.
- embedded-stream: as stream, but the scheduler runs inside the API server's process and event loop
  (bench/scheduler/embedded_server.py), as `pykubelet server` will run it.

Usage: python bench/scheduler/throughput.py [--pods 1000] [--nodes 100] [--out DIR]
       python bench/scheduler/throughput.py --smoke --out DIR    # 20 pods onto 5 nodes
A fourth line times the decisions alone (same plugins, no API) for comparison.
Writes scheduler-throughput.{json,md,svg} (default bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, out_dir, write_report
from controlplane.scheduler.algorithm import schedule
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.plugins import build_scores
from controlplane.scheduler.podinfo import pod_info
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer

GOAL = 200.0


def node(name: str) -> dict:
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def pod(name: str, owner_uid: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "bench"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "bench",
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ]
        },
    }


async def create_all(client: KubeClient, path: str, objs: list[dict], concurrency: int = 32) -> float:
    sem = asyncio.Semaphore(concurrency)

    async def one(o: dict) -> None:
        async with sem:
            await client.create(path, o)

    start = time.monotonic()
    await asyncio.gather(*(one(o) for o in objs))
    return time.monotonic() - start


async def wait_bound(client: KubeClient, ns: str, total: int, timeout: float) -> tuple[float, Counter[str]]:
    """Watch pods in `ns` until `total` are bound; returns the monotonic time of the last binding."""
    items, rv = await client.list(f"/api/v1/namespaces/{ns}/pods")
    bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}
    last = time.monotonic()
    deadline = time.monotonic() + timeout
    while len(bound) < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(bound)}/{total} bound after {timeout}s")
        async with asyncio.timeout(max(deadline - time.monotonic(), 0.1)):
            async for ev in client.watch(
                f"/api/v1/namespaces/{ns}/pods", {"resourceVersion": rv, "timeoutSeconds": 60}
            ):
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                n = (obj.get("spec") or {}).get("nodeName")
                if n and obj["metadata"]["name"] not in bound:
                    bound[obj["metadata"]["name"]] = n
                    last = time.monotonic()
                    if len(bound) >= total:
                        break
    return last, Counter(bound.values())


async def wait_events(client: KubeClient, ns: str, total: int, timeout: float = 60) -> float:
    """When the last `Scheduled` event was written (events trail bindings on purpose). Watched, not
    polled, so measuring costs the server little."""
    path = f"/api/v1/namespaces/{ns}/events"
    items, rv = await client.list(path, {"fieldSelector": "reason=Scheduled"})
    seen = {e["metadata"]["name"] for e in items}
    async with asyncio.timeout(timeout):
        while len(seen) < total:
            async for ev in client.watch(
                path, {"fieldSelector": "reason=Scheduled", "resourceVersion": rv, "timeoutSeconds": 60}
            ):
                rv = ev["object"]["metadata"].get("resourceVersion", rv)
                if ev["type"] == "ADDED":
                    seen.add(ev["object"]["metadata"]["name"])
                    if len(seen) >= total:
                        break
    return time.monotonic()


class CpuMeter:
    """CPU seconds the given processes spend between start() and stop(): unlike wall time, this barely
    depends on what else the machine is doing, so it says what an idle machine would sustain."""

    def __init__(self, **pids: int) -> None:
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.used: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        return {n: sum(p.cpu_times()[:2]) for n, p in self.procs.items()}

    def start(self) -> CpuMeter:
        self._start = self._now()
        return self

    def stop(self) -> dict[str, float]:
        end = self._now()
        self.used = {n: end[n] - self._start[n] for n in end}
        return self.used


def start_scheduler(kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet",
                "scheduler",
                "--kubeconfig",
                str(kubeconfig),
                "--secure-port",
                "0",
                # As scheduler_perf's scheduler: no lease, so a server slowed by the load a run puts
                # on it cannot make the scheduler step down mid-run (seen at 5000 nodes).
                "--leader-elect=false",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    try:
        p.wait(15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


async def wait_synced(log: Path, timeout: float = 30) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "caches synced" in log.read_text(errors="replace"):
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise TimeoutError(f"scheduler did not sync; log:\n{log.read_text()[-2000:]}")


async def scenario(server: ApiServer, work: Path, name: str, pods: int, nodes: int) -> dict:
    client = KubeClient(load_kubeconfig(server.kubeconfig), qps=0, max_connections=64)
    try:
        ns = f"bench-{name}"
        await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
        objs = [pod(f"p{i:05d}", f"owner-{name}") for i in range(pods)]
        log = work / f"scheduler-{name}.log"
        result: dict = {"scenario": name, "pods": pods, "nodes": nodes}
        if name == "backlog":
            result["create_seconds"] = await create_all(client, f"/api/v1/namespaces/{ns}/pods", objs)
            sched = start_scheduler(server.scheduler_kubeconfig, log)
            try:
                ready = await wait_synced(log)
                meter = CpuMeter(server=server_pid(server), scheduler=sched.pid).start()
                last, per_node = await wait_bound(client, ns, pods, 120)
                events_done = await wait_events(client, ns, pods)
                result["cpu"] = meter.stop()
            finally:
                stop_process(sched)
            result["seconds"] = last - ready
            result["events_seconds"] = events_done - ready
        else:
            sched = start_scheduler(server.scheduler_kubeconfig, log)
            try:
                await wait_synced(log)
                waiter = asyncio.create_task(wait_bound(client, ns, pods, 120))
                await asyncio.sleep(0.2)  # the watch is open before the first create
                first = time.monotonic()
                meter = CpuMeter(server=server_pid(server), scheduler=sched.pid).start()
                result["create_seconds"] = await create_all(client, f"/api/v1/namespaces/{ns}/pods", objs)
                last, per_node = await waiter
                events_done = await wait_events(client, ns, pods)
                result["cpu"] = meter.stop()
            finally:
                stop_process(sched)
            result["seconds"] = last - first
            result["events_seconds"] = events_done - first
        result["pods_per_second"] = pods / result["seconds"]
        result["create_per_second"] = pods / result["create_seconds"]
        result["per_node_min"], result["per_node_max"] = min(per_node.values()), max(per_node.values())
        result["nodes_used"] = len(per_node)
        return result
    finally:
        await client.close()


def server_pid(server: ApiServer) -> int:
    pid = server.pid
    if pid is None:
        raise RuntimeError("the API server is not running")
    return pid


class EmbeddedServer(ApiServer):
    """The rig's ApiServer (same daemon handling, readiness and teardown), but running
    embedded_server.py: API server + scheduler in one process."""

    def command(self) -> list[str]:
        return [
            sys.executable,
            str(Path(__file__).with_name("embedded_server.py")),
            str(self.data_dir),
            str(self.port),
        ]


async def add_nodes(server: ApiServer, count: int) -> None:
    client = KubeClient(load_kubeconfig(server.kubeconfig), qps=0)
    try:
        await create_all(client, "/api/v1/nodes", [node(f"node-{i:03d}") for i in range(count)])
    finally:
        await client.close()


async def embedded_stream(work: Path, pods: int, nodes: int) -> dict:
    with EmbeddedServer(work / "embedded") as server:
        await add_nodes(server, nodes)
        client = KubeClient(load_kubeconfig(server.kubeconfig), qps=0, max_connections=64)
        try:
            ns = "bench-embedded"
            await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            waiter = asyncio.create_task(wait_bound(client, ns, pods, 120))
            await asyncio.sleep(0.2)
            first = time.monotonic()
            meter = CpuMeter(server=server_pid(server)).start()
            create = await create_all(
                client,
                f"/api/v1/namespaces/{ns}/pods",
                [pod(f"p{i:05d}", "owner-embedded") for i in range(pods)],
            )
            last, per_node = await waiter
            events_done = await wait_events(client, ns, pods)
            cpu = meter.stop()
        finally:
            await client.close()
    return {
        "scenario": "embedded-stream",
        "pods": pods,
        "nodes": nodes,
        "create_seconds": create,
        "cpu": cpu,
        "seconds": last - first,
        "events_seconds": events_done - first,
        "pods_per_second": pods / (last - first),
        "create_per_second": pods / create,
        "per_node_min": min(per_node.values()),
        "per_node_max": max(per_node.values()),
        "nodes_used": len(per_node),
    }


def decisions_only(pods: int, nodes: int) -> dict:
    """The same filters and scores with no API in the way: what one core decides per second. The gap to
    the end-to-end figures is the API server's and the HTTP layer's share."""
    cache = SchedulerCache()
    for i in range(nodes):
        cache.set_node(node(f"node-{i:03d}"))
    infos = []
    for i in range(pods):
        body = pod(f"p{i:05d}", "owner-decisions")
        body["metadata"].update(namespace="bench", uid=f"uid-{i}")
        infos.append(pod_info(body))
    filters, scores, rng = default_filters(), build_scores(SchedulerConfig()), random.Random(0)
    start = time.process_time()
    for info in infos:
        view = cache.cluster_view()
        chosen = schedule(info, view.all_nodes, filters, scores, view, rng)
        cache.assume(info, chosen.name)
    seconds = time.process_time() - start
    per_node = Counter(cache.pod_node(i.uid) for i in infos)
    return {
        "scenario": "decisions only (no API, CPU time)",
        "pods": pods,
        "nodes": nodes,
        "seconds": seconds,
        "events_seconds": float("nan"),
        "pods_per_second": pods / seconds,
        "create_seconds": float("nan"),
        "create_per_second": float("nan"),
        "per_node_min": min(per_node.values()),
        "per_node_max": max(per_node.values()),
        "nodes_used": len(per_node),
    }


def svg_plot(results: list[dict]) -> str:
    """A plain SVG bar chart (no plotting library needed): pods/s per scenario against the goal."""
    width, bar_h, gap, left = 640, 28, 14, 230
    top = max(max(r["pods_per_second"] for r in results), GOAL) * 1.1
    height = len(results) * (bar_h + gap) + 60
    scale = (width - left - 20) / top
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="10" y="18" font-size="14">Scheduler throughput, pods/s ({results[0]["pods"]} pods, '
        f"{results[0]['nodes']} nodes)</text>",
    ]
    for i, r in enumerate(results):
        y = 34 + i * (bar_h + gap)
        w = r["pods_per_second"] * scale
        colour = "#4a7" if r["pods_per_second"] >= GOAL else "#c84"
        parts += [
            f'<text x="10" y="{y + bar_h * 0.65:.0f}">{r["scenario"][:32]}</text>',
            f'<rect x="{left}" y="{y}" width="{w:.0f}" height="{bar_h}" fill="{colour}"/>',
            f'<text x="{left + w + 4:.0f}" y="{y + bar_h * 0.65:.0f}">{r["pods_per_second"]:.0f}</text>',
        ]
    gx = left + GOAL * scale
    parts += [
        f'<line x1="{gx:.0f}" y1="28" x2="{gx:.0f}" y2="{height - 20}" stroke="#000" stroke-dasharray="4"/>',
        f'<text x="{gx + 4:.0f}" y="{height - 8}">goal {GOAL:.0f}/s</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


async def main_async(args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
        work = Path(tmp)
        results = []
        wanted = args.scenarios
        if "backlog" in wanted or "stream" in wanted:
            with ApiServer(work / "api") as server:
                await add_nodes(server, args.nodes)
                for name in ("backlog", "stream"):
                    if name in wanted:
                        results.append(await scenario(server, work, name, args.pods, args.nodes))
        if "embedded" in wanted:
            results.append(await embedded_stream(work, args.pods, args.nodes))
        if "decisions" in wanted:
            results.append(decisions_only(args.pods, args.nodes))
        return results


def cpu_cell(r: dict) -> str:
    cpu = r["cpu"]
    return " + ".join(f"{cpu[k] * 1000 / r['pods']:.2f}" for k in ("server", "scheduler") if k in cpu)


def idle_estimate(r: dict) -> float:
    """Pods/s on an otherwise idle 2-core machine: each process can use at most one core (one event loop
    each), so the busier process sets the pace."""
    busiest = max(r["cpu"].values())
    return r["pods"] / busiest if busiest else float("nan")


def report(results: list[dict]) -> str:
    lines = [
        "# Scheduler throughput",
        "",
        f"Goal: {GOAL:.0f} pods/s end to end (1 000 pods, 100 nodes) on this machine.",
        "",
        "| scenario | pods | nodes | seconds to all bound | pods/s | ratio to goal | all Scheduled events (s) "
        "| pod creation/s | pods per node (min-max) | CPU ms/pod: server + scheduler | idle-machine estimate, pods/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        if r["scenario"].startswith("decisions"):
            lines.append(
                f"| {r['scenario']} | {r['pods']} | {r['nodes']} | {r['seconds']:.2f} | "
                f"{r['pods_per_second']:.0f} | {r['pods_per_second'] / GOAL:.2f}x | - | - | "
                f"{r['per_node_min']}-{r['per_node_max']} | - | - |"
            )
            continue
        lines.append(
            f"| {r['scenario']} | {r['pods']} | {r['nodes']} | {r['seconds']:.2f} | "
            f"{r['pods_per_second']:.0f} | {r['pods_per_second'] / GOAL:.2f}x | {r['events_seconds']:.2f} | "
            f"{r['create_per_second']:.0f} | {r['per_node_min']}-{r['per_node_max']} | "
            f"{cpu_cell(r)} | {idle_estimate(r):.0f} |"
        )
    lines += [
        "",
        "backlog: pods created first, clock starts when the scheduler's caches are synced. "
        "stream: scheduler running, clock starts at the first create, so pod creation (the baseline "
        "column, measured in the same run) bounds it. CPU is measured from the clock's start until the "
        "last Scheduled event is written, so it includes the events (and, for the stream scenarios, "
        "the pod creations). The idle-machine estimate is pods / CPU seconds of the busier process.",
        "",
        f"Load average while running: {os.getloadavg()[0]:.1f} (2 cores; other work on the machine "
        "slows every figure).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=None, help="default 1000 (smoke: 20)")
    parser.add_argument("--nodes", type=int, default=None, help="default 100 (smoke: 5)")
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["backlog", "stream", "embedded", "decisions"],
        choices=["backlog", "stream", "embedded", "decisions"],
    )
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    args.pods = args.pods or (20 if args.smoke else 1000)
    args.nodes = args.nodes or (5 if args.smoke else 100)
    results = asyncio.run(main_async(args))
    text = report(results)
    write_report(out, "scheduler-throughput", results, text, svg_plot(results))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
