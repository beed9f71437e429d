"""API server replicas benchmark (issue 19): write and list throughput with 1, 2 and 3 API servers on the
same etcd, same run, same machine. Figures are reported, never asserted.

  python bench/apiserver/replicas.py [--seconds 10 --writers 32 --listers 4 --objects 1000 --members 1] [--out DIR]
  python bench/apiserver/replicas.py --smoke --out DIR      # 1 s windows, a few clients

One etcd (the rig's, TLS with client certificates; `--members 3` for a 3-member cluster) and three API
servers on it (`ApiServerReplicas`: one CA, each on its own loopback address). "1 server" sends every
request to the first replica, "N servers" spreads the same clients over the first N (client i to replica
i mod N); the windows alternate (1 2 3 1 2 3 ...) so that the machine's other load falls on every shape. Writes: closed-loop ConfigMap creates by `--writers`
connections. Lists: closed-loop LISTs of a namespace of `--objects` ConfigMaps (served from the watch
cache) by `--listers` connections. Beside the rates: CPU seconds of each API server and of etcd per
1 000 requests, to show where the time goes (a second replica adds CPU to spend, but on 2 cores it
competes with etcd and the load generator for the same two).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct, ssl_context
from bench.reporting import bar_svg, run_and_report
from pykubelet.rig.apiserver import ApiServer, ApiServerReplicas
from pykubelet.rig.etcd import Etcd, EtcdCluster

CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
SHAPES = (1, 2, 3)


async def connect(servers: list[ApiServer], count: int) -> list[RawConnection]:
    """`count` keep-alive connections, connection i to servers[i mod len(servers)]."""
    return [
        await RawConnection.open(servers[i % len(servers)].host, servers[0].port, ssl_context(servers[0]))
        for i in range(count)
    ]


async def window(servers: list[ApiServer], pids: dict[str, int], count: int, seconds: float, request) -> dict:
    """Closed loop: `count` connections each sending `request(conn, i)` back to back for `seconds`."""
    conns = await connect(servers, count)
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}

    async def loop(conn: RawConnection, worker: int) -> None:
        nonlocal errors
        i = 0
        while time.perf_counter() < stop:
            sent = time.perf_counter()
            ok = await request(conn, worker, i)
            latencies.append(time.perf_counter() - sent)
            errors += 0 if ok else 1
            i += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(c, w) for w, c in enumerate(conns)))
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    return {
        "requests": len(latencies),
        "errors": errors,
        "elapsed_s": elapsed,
        "latencies": latencies,
        "cpu_s": cpu,
    }


def summary(windows: list[dict]) -> dict:
    latencies = [x for w in windows for x in w["latencies"]]
    requests = sum(w["requests"] for w in windows)
    elapsed = sum(w["elapsed_s"] for w in windows)
    cpu: dict[str, float] = {}
    for w in windows:
        for k, v in w["cpu_s"].items():
            cpu[k] = cpu.get(k, 0.0) + v
    return {
        "requests": requests,
        "per_second": round(requests / elapsed, 1) if elapsed else 0.0,
        "errors": sum(w["errors"] for w in windows),
        "p50_ms": round(pct(latencies, 50) * 1000, 2) if latencies else None,
        "p99_ms": round(pct(latencies, 99) * 1000, 2) if latencies else None,
        "cpu_s_per_1000": {k: round(v / requests * 1000, 3) for k, v in cpu.items()} if requests else {},
    }


async def prepare(server: ApiServer, objects: int) -> None:
    (conn,) = await connect([server], 1)
    for ns in ("bench-write", "bench-list"):
        body = json.dumps({"metadata": {"name": ns}}).encode()
        status, text = await conn.request("POST", "/api/v1/namespaces", body)
        if status not in (201, 409):
            raise RuntimeError(f"namespace {ns}: {status} {text[:200]!r}")
    for i in range(objects):
        body = json.dumps({"metadata": {"name": f"cm-{i}"}, "data": {"k": "v" * 64}}).encode()
        status, text = await conn.request("POST", CONFIGMAPS.format(ns="bench-list"), body)
        if status not in (201, 409):
            raise RuntimeError(f"configmap {i}: {status} {text[:200]!r}")
    conn.close()


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="replicas-bench-") as tmp:
        root = Path(tmp)
        etcd: Etcd | EtcdCluster = (
            EtcdCluster(root / "etcd", args.members) if args.members > 1 else Etcd(root / "etcd")
        )
        group: ApiServerReplicas | None = None
        try:
            etcd.start()
            group = ApiServerReplicas(root, len(SHAPES), etcd)
            group.start()
            await prepare(group.servers[0], args.objects)
            etcd_pids = [m.pid for m in etcd.members] if isinstance(etcd, EtcdCluster) else [etcd.pid]
            pids = {f"apiserver-{i}": s.pid or 0 for i, s in enumerate(group.servers)}
            pids.update(
                {f"etcd-{i}" if len(etcd_pids) > 1 else "etcd": p or 0 for i, p in enumerate(etcd_pids)}
            )
            run_id = os.getpid()

            async def write(conn: RawConnection, worker: int, i: int) -> bool:
                body = json.dumps(
                    {"metadata": {"name": f"w-{run_id}-{worker}-{i}-{time.monotonic_ns()}"}}
                ).encode()
                status, _ = await conn.request("POST", CONFIGMAPS.format(ns="bench-write"), body)
                return status == 201

            async def list_(conn: RawConnection, worker: int, i: int) -> bool:
                status, body = await conn.request("GET", CONFIGMAPS.format(ns="bench-list"), b"")
                return status == 200 and len(body) > args.objects * 64

            results: dict[str, dict[int, list[dict]]] = {
                k: {n: [] for n in SHAPES} for k in ("write", "list")
            }
            share = args.seconds / args.rounds
            for _ in range(args.rounds):
                for shape in SHAPES:
                    servers = group.servers[:shape]
                    results["write"][shape].append(await window(servers, pids, args.writers, share, write))
                    results["list"][shape].append(await window(servers, pids, args.listers, share, list_))
            return {
                "objects_listed": args.objects,
                "writers": args.writers,
                "listers": args.listers,
                "seconds_per_shape": args.seconds,
                "etcd_members": args.members,
                "load_average_1m": os.getloadavg()[0],
                **{f"{kind}_{shape}": summary(results[kind][shape]) for kind in results for shape in SHAPES},
            }
        finally:
            if group is not None:
                group.stop()
            etcd.stop()


def markdown(report: dict) -> str:
    lines = [
        f"# One etcd ({report['etcd_members']} member(s)), 1, 2 and 3 API servers: write and list throughput",
        "",
        f"Closed loop, {report['seconds_per_shape']:g} s per shape and kind in alternating windows; writes: "
        f"{report['writers']} connections creating ConfigMaps; lists: {report['listers']} connections listing "
        f"{report['objects_listed']} ConfigMaps (consistent: etcd's current revision, then the watch cache). Load average {report['load_average_1m']:.1f}.",
        "",
        "| what | API servers | per second | p50 ms | p99 ms | errors | CPU s per 1 000: API servers / etcd |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("write", "list"):
        for shape in SHAPES:
            r = report[f"{kind}_{shape}"]
            cpu = r["cpu_s_per_1000"]
            lines.append(
                f"| {kind} | {shape} | {r['per_second']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} | "
                f"{' + '.join(str(v) for k, v in cpu.items() if k.startswith('apiserver'))} / "
                f"{' + '.join(str(v) for k, v in cpu.items() if k.startswith('etcd'))} |"
            )
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [
        (f"{kind} x{shape}", report[f"{kind}_{shape}"]["per_second"])
        for kind in ("write", "list")
        for shape in SHAPES
    ]
    return bar_svg("Throughput, 1, 2 and 3 API servers on one etcd", bars, "requests/s")


SMOKE = {"seconds": 1.0, "rounds": 1, "writers": 4, "listers": 2, "objects": 20, "members": 1}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10, help="per shape and kind, split over the rounds")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--listers", type=int, default=4)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--members", type=int, default=1, help="etcd members (3: a cluster on this machine)")
    run_and_report(parser, "apiserver-replicas", main, markdown, svg_plot, SMOKE)
