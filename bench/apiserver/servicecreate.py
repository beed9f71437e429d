"""Service creates per second with 1 000 and with 8 000 Services already stored, in one run (issue 36).

bench/dns/distinct.py, filling a server with 10 000 Services, saw creates slow from 11/s to 2/s near
8 000: each create's cost grew with the number of Services. This benchmark measures that cost at a few
fill levels of one server, so that a cost growing with the count shows as a ratio below 1 whatever the
machine's load: the server is filled to each mark (unmeasured, 8 creates in flight), then --sample more
ClusterIP Services are created with the same concurrency and timed, with the API server's CPU time per
create read from /proc (the figure other tenants disturb least). Each row carries the load average.
Writes apiserver-servicecreate.{json,md,svg} (default bench/results/).

    python3 bench/apiserver/servicecreate.py [--marks 1000,8000] [--sample 1000] [--out DIR]
    python3 bench/apiserver/servicecreate.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from bench.scale.density import ProcessUse
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.eventloop import loop_factory
from pykubelet.rig.apiserver import ApiServer

NAMESPACE = "bench-services"
IN_FLIGHT = 8
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of one process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def create_range(kube: KubeClient, first: int, count: int) -> None:
    """Services svc-first .. svc-(first+count-1), IN_FLIGHT at a time."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> None:
        body = {"metadata": {"name": f"svc-{i}"}, "spec": {"ports": [{"name": "http", "port": 80}]}}
        async with gate:
            await kube.create(f"/api/v1/namespaces/{NAMESPACE}/services", body)

    await asyncio.gather(*(one(i) for i in range(first, first + count)))


async def measure(server: ApiServer, marks: list[int], sample: int) -> list[dict]:
    """Per mark: fill up to it, then time `sample` creates."""
    kube = KubeClient(load_kubeconfig(server.kubeconfig), qps=0, request_timeout=300.0)
    rows = []
    try:
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        stored = 0
        for mark in marks:
            fill_start = time.perf_counter()
            await create_range(kube, stored, mark - stored)
            fill_seconds = time.perf_counter() - fill_start
            stored = mark
            assert server.pid is not None
            load = os.getloadavg()[0]
            tree_use = ProcessUse(server.pid)  # the process and its children (controllers, scheduler)
            cpu, start = cpu_seconds(server.pid), time.perf_counter()
            await create_range(kube, stored, sample)
            wall, cpu = time.perf_counter() - start, cpu_seconds(server.pid) - cpu
            tree = tree_use.cpu_seconds() - tree_use.start
            stored += sample
            rows.append(
                {
                    "existing": mark,
                    "sample": sample,
                    "creates_per_s": sample / wall,
                    "server_cpu_ms_per_create": cpu / sample * 1e3,
                    "with_controllers_cpu_ms_per_create": tree / sample * 1e3,
                    "fill_seconds": fill_seconds,
                    "loadavg_1m": load,
                }
            )
            print(
                f"{mark} existing: {sample / wall:.1f} creates/s, {cpu / sample * 1e3:.2f} ms server CPU "
                f"per create (fill {fill_seconds:.0f} s, load {load:.1f})",
                flush=True,
            )
    finally:
        await kube.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--marks", default="1000,8000", help="Services stored before each timed sample")
    parser.add_argument("--sample", type=int, default=1000, help="creates timed at each mark")
    parser.add_argument(
        "--controllers",
        action="store_true",
        help="run the controller manager and scheduler too (their CPU per create is reported beside)",
    )
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    marks = sorted(int(m) for m in args.marks.split(","))
    if args.smoke:
        marks, args.sample = [10, 40], 10
    with (
        tempfile.TemporaryDirectory(prefix="bench-svc-") as tmp,
        ApiServer(Path(tmp) / "api", controllers=args.controllers, scheduler=args.controllers) as api,
    ):
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            rows = runner.run(measure(api, marks, args.sample))
    first, last = rows[0], rows[-1]
    summary = {
        "rate_ratio": round(last["creates_per_s"] / first["creates_per_s"], 3),
        "cpu_ratio": round(last["server_cpu_ms_per_create"] / first["server_cpu_ms_per_create"], 3),
        "controllers": args.controllers,
    }
    data = {"marks": marks, "sample": args.sample, "in_flight": IN_FLIGHT, "runs": rows, **summary}
    table = "\n".join(
        f"| {r['existing']} | {r['loadavg_1m']:.1f} | {r['creates_per_s']:.1f} | "
        f"{r['server_cpu_ms_per_create']:.2f} | {r['with_controllers_cpu_ms_per_create']:.2f} | "
        f"{r['fill_seconds']:.0f} |"
        for r in rows
    )
    markdown = (
        f"# Service creates with more Services stored ({args.sample} timed per mark, {IN_FLIGHT} in flight)\n\n"
        "| Services stored | load 1m | creates/s | server CPU ms per create | with its children | fill s |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        f"{table}\n\n"
        f"- creates/s at {last['existing']} against {first['existing']}: {summary['rate_ratio']}x\n"
        f"- server CPU per create at {last['existing']} against {first['existing']}: {summary['cpu_ratio']}x\n\n"
        "One API server (SQLite store, HTTPS, client certificate), ClusterIP Services with one port; the "
        "cost of a create should not grow with the number stored (ratios near 1). 'With its children': "
        "the server's process tree, which holds the controller manager and scheduler when the run has "
        f"them (this one: {'yes' if args.controllers else 'no'}).\n"
    )
    svg = bar_svg(
        "Server CPU per Service create, by Services stored",
        [(f"{r['existing']} stored", r["server_cpu_ms_per_create"]) for r in rows],
        "ms",
    )
    write_report(out, "apiserver-servicecreate", data, markdown, svg)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
