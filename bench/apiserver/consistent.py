"""Consistent reads benchmark (issue 19): what a read through one API server costs when it must include
every write made through another one on the same etcd, same run, same machine. Figures are reported,
never asserted.

  python bench/apiserver/consistent.py [--pods 10000 --rounds 5 --gets 2000 --members 1] [--out DIR]
  python bench/apiserver/consistent.py --smoke --out DIR     # 50 pods, a few rounds

Two API servers (`ApiServerReplicas`) on the rig's etcd (TLS with client certificates; `--members 3` for
a 3-member cluster). `--pods` pods are created through replica A; every read goes to replica B:
- GET of one pod, `resourceVersion=0` (B's watch cache as it is) against no resourceVersion (consistent:
  B asks etcd its current revision, a linearizable read, and waits for its cache to get there);
- LIST of the namespace: from the cache (`resourceVersion=0`), consistent from the cache (no
  resourceVersion), and from etcd itself (`limit` above the count: paged lists are read from etcd at
  the consistent revision, as upstream read every consistent list before ConsistentListFromCache);
- write through A then at once GET through B (the read waits for B's watch to bring the write).
Beside the latencies: CPU per request of B and of etcd, which says whether the time is etcd's or ours.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, bulk, cpu_seconds, pct, ssl_context
from bench.reporting import bar_svg, run_and_report
from pykubelet.rig.apiserver import ApiServer, ApiServerReplicas
from pykubelet.rig.etcd import Etcd, EtcdCluster

NS = "bench"
PODS = f"/api/v1/namespaces/{NS}/pods"


def pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "labels": {"app": f"a{i % 10}"}},
        "spec": {
            "nodeName": f"node-{i % 500}",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "ports": [{"containerPort": 8080}],
                }
            ],
        },
    }


async def create_pods(server: ApiServer, pods: int) -> float:
    connector = aiohttp.TCPConnector(ssl=ssl_context(server), limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        await session.post(f"{server.url}/api/v1/namespaces", json={"metadata": {"name": NS}})
        started = time.perf_counter()
        await bulk(session, f"{server.url}{PODS}", [pod(i) for i in range(pods)], concurrency=32)
        return pods / (time.perf_counter() - started)


async def timed(conn: RawConnection, count: int, path: str, pids: dict[str, int], want: int = 200) -> dict:
    """`count` sequential requests on one connection; latencies and CPU per request."""
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    latencies = []
    size = 0
    for _ in range(count):
        sent = time.perf_counter()
        status, body = await conn.request("GET", path, b"")
        latencies.append(time.perf_counter() - sent)
        if status != want:
            raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
        size = len(body)
    return {
        "requests": count,
        "bytes": size,
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
        "median_ms": round(statistics.median(latencies) * 1000, 2),
        "cpu_ms_per_request": {
            k: round((cpu_seconds(p) - cpu0[k]) / count * 1000, 3) for k, p in pids.items()
        },
    }


async def write_then_read(a: RawConnection, b: RawConnection, count: int) -> dict:
    """Create through A, then at once GET through B (which must find it); latency of the GET alone."""
    latencies = []
    run = os.getpid()
    for i in range(count):
        name = f"wr-{run}-{i}"
        body = json.dumps({"metadata": {"name": name}, "data": {"i": str(i)}}).encode()
        status, text = await a.request("POST", f"/api/v1/namespaces/{NS}/configmaps", body)
        if status != 201:
            raise RuntimeError(f"create: {status} {text[:300]!r}")
        sent = time.perf_counter()
        status, text = await b.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{name}", b"")
        latencies.append(time.perf_counter() - sent)
        if status != 200:
            raise RuntimeError(f"read through B right after the write through A: {status} {text[:300]!r}")
    return {
        "requests": count,
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
    }


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="consistent-bench-") as tmp:
        root = Path(tmp)
        etcd: Etcd | EtcdCluster = (
            EtcdCluster(root / "etcd", args.members) if args.members > 1 else Etcd(root / "etcd")
        )
        group: ApiServerReplicas | None = None
        try:
            etcd.start()
            group = ApiServerReplicas(root, 2, etcd)
            group.start()
            a_server, b_server = group.servers
            create_rate = await create_pods(a_server, args.pods)
            etcd_pid = etcd.members[0].pid if isinstance(etcd, EtcdCluster) else etcd.pid
            pids = {"apiserver-b": b_server.pid or 0, "etcd": etcd_pid or 0}
            a = await RawConnection.open(a_server.host, a_server.port, ssl_context(a_server))
            b = await RawConnection.open(b_server.host, b_server.port, ssl_context(b_server))
            one = f"{PODS}/pod-{args.pods // 2}"
            report: dict = {
                "pods": args.pods,
                "etcd_members": args.members,
                "create_rate_per_s": round(create_rate, 1),
            }
            shapes = {
                "get_cache": (args.gets, f"{one}?resourceVersion=0"),
                "get_consistent": (args.gets, one),
                "list_cache": (args.rounds, f"{PODS}?resourceVersion=0"),
                "list_consistent": (args.rounds, PODS),
                "list_etcd": (args.rounds, f"{PODS}?limit={args.pods + 1}"),
            }
            runs: dict[str, list[dict]] = {k: [] for k in shapes}
            # Alternating, in two halves, so that drift in the machine's other load falls on every shape.
            for _ in range(2):
                for name, (count, path) in shapes.items():
                    runs[name].append(await timed(b, max(count // 2, 1), path, pids))
            for name, halves in runs.items():
                merged = dict(halves[0])
                merged["requests"] = sum(h["requests"] for h in halves)
                for key in ("p50_ms", "p99_ms", "median_ms"):
                    merged[key] = round(statistics.mean(h[key] for h in halves), 2)
                merged["cpu_ms_per_request"] = {
                    k: round(statistics.mean(h["cpu_ms_per_request"][k] for h in halves), 3) for k in pids
                }
                report[name] = merged
            report["write_a_read_b"] = await write_then_read(a, b, args.gets // 4 or 1)
            a.close()
            b.close()
            report["load_average_1m"] = os.getloadavg()[0]
            return report
        finally:
            if group is not None:
                group.stop()
            etcd.stop()


LABELS = {
    "get_cache": "GET one pod, resourceVersion=0 (cache)",
    "get_consistent": "GET one pod, consistent (etcd revision + cache)",
    "list_cache": "LIST, resourceVersion=0 (cache)",
    "list_consistent": "LIST, consistent from the cache",
    "list_etcd": "LIST, consistent from etcd",
}


def markdown(report: dict) -> str:
    lines = [
        f"# Consistent reads through replica B of writes through replica A ({report['pods']} pods, "
        f"{report['etcd_members']} etcd member(s))",
        "",
        f"Pods created through A at {report['create_rate_per_s']}/s. Every read goes to B on one keep-alive "
        f"connection. Load average {report['load_average_1m']:.1f}.",
        "",
        "| read | requests | p50 ms | p99 ms | bytes | CPU ms per request: apiserver B / etcd |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, label in LABELS.items():
        r = report[key]
        cpu = r["cpu_ms_per_request"]
        lines.append(
            f"| {label} | {r['requests']} | {r['p50_ms']} | {r['p99_ms']} | {r['bytes']} | "
            f"{cpu['apiserver-b']} / {cpu['etcd']} |"
        )
    w = report["write_a_read_b"]
    lines += [
        "",
        f"Write through A, then at once a consistent GET through B: {w['requests']} times, every one found; "
        f"GET p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms.",
    ]
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = [(key.replace("_", " "), report[key]["p50_ms"]) for key in LABELS]
    return bar_svg("Reads through replica B, p50", bars, "ms")


SMOKE = {"pods": 50, "rounds": 4, "gets": 40, "members": 1}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10, help="lists per shape")
    parser.add_argument("--gets", type=int, default=2000, help="GETs per shape")
    parser.add_argument("--members", type=int, default=1, help="etcd members (3: a cluster on this machine)")
    run_and_report(parser, "apiserver-consistent", main, markdown, svg_plot, SMOKE)
