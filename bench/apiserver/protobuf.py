"""Protobuf against JSON (issue 29): pod create and the list of 10 000 pods through the API server in
both encodings, same run, same server, windows interleaved. Figures are reported, never asserted.

  python bench/apiserver/protobuf.py [--pods 10000 --rounds 6 --connections 16] [--out DIR]
  python bench/apiserver/protobuf.py --smoke --out DIR     # 40 pods, 2 rounds

Creates: `--pods` pods in each encoding, in alternating chunks of 500 (JSON into one namespace,
protobuf bodies with `Accept: application/vnd.kubernetes.protobuf` into another), over `--connections`
keep-alive connections. Lists: the whole protobuf namespace as protobuf (PodList) and the whole JSON
namespace as JSON, alternating, `--rounds` each. Beside the latencies, the server's CPU per request
(from /proc), the figure other tenants' load disturbs least. Goal: protobuf at least as fast as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct, ssl_context
from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver.protobuf import codec
from pykubelet.rig.apiserver import ApiServer

PB = "application/vnd.kubernetes.protobuf"
FORMATS = ("json", "protobuf")
CHUNK = 500


def pod(i: int, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "namespace": namespace, "labels": {"app": f"a{i % 10}"}},
        "spec": {
            "nodeName": f"node-{i % 500}",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "ports": [{"containerPort": 8080}],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def body(fmt: str, i: int) -> tuple[bytes, str, str]:
    """(body, content type, accept) of one create in `fmt`."""
    obj = pod(i, fmt)
    if fmt == "protobuf":
        return codec.encode_object(obj), PB, PB
    return json.dumps(obj).encode(), "application/json", "application/json"


async def create_chunk(conns: list[RawConnection], fmt: str, first: int, count: int) -> list[float]:
    """`count` creates over every connection at once; each create's latency."""
    bodies = [body(fmt, i) for i in range(first, first + count)]  # encoded before the clock starts
    latencies: list[float] = []
    queue = list(reversed(bodies))

    async def worker(conn: RawConnection) -> None:
        while queue:
            data, content_type, accept = queue.pop()
            sent = time.perf_counter()
            status, answer = await conn.request(
                "POST", f"/api/v1/namespaces/{fmt}/pods", data, content_type, accept
            )
            latencies.append(time.perf_counter() - sent)
            if status != 201:
                raise RuntimeError(f"{fmt} create: {status} {answer[:300]!r}")

    await asyncio.gather(*(worker(c) for c in conns))
    return latencies


async def creates(conns: list[RawConnection], pods: int, pid: int) -> dict:
    per: dict[str, dict] = {f: {"latencies": [], "seconds": 0.0, "cpu": 0.0} for f in FORMATS}
    for first in range(0, pods, CHUNK):
        count = min(CHUNK, pods - first)
        order = FORMATS if (first // CHUNK) % 2 == 0 else tuple(reversed(FORMATS))
        for fmt in order:
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            per[fmt]["latencies"] += await create_chunk(conns, fmt, first, count)
            per[fmt]["seconds"] += time.perf_counter() - t0
            per[fmt]["cpu"] += cpu_seconds(pid) - cpu0
    return {
        fmt: {
            "pods": pods,
            "rate_per_s": round(pods / r["seconds"], 1),
            "p50_ms": round(pct(r["latencies"], 50) * 1000, 2),
            "p99_ms": round(pct(r["latencies"], 99) * 1000, 2),
            "server_cpu_ms_per_request": round(r["cpu"] / pods * 1000, 3),
        }
        for fmt, r in per.items()
    }


async def lists(conn: RawConnection, rounds: int, pods: int, pid: int) -> dict:
    per: dict[str, dict] = {f: {"latencies": [], "cpus": [], "bytes": 0} for f in FORMATS}
    for r in range(rounds):
        for fmt in FORMATS if r % 2 == 0 else tuple(reversed(FORMATS)):
            accept = f"{PB}, application/json" if fmt == "protobuf" else "application/json"
            cpu0, sent = cpu_seconds(pid), time.perf_counter()
            status, answer = await conn.request("GET", f"/api/v1/namespaces/{fmt}/pods", b"", accept=accept)
            per[fmt]["latencies"].append(time.perf_counter() - sent)
            per[fmt]["cpus"].append(cpu_seconds(pid) - cpu0)
            if status != 200:
                raise RuntimeError(f"{fmt} list: {status} {answer[:300]!r}")
            count = (
                len(codec.decode_envelope(answer)[0]["items"])
                if fmt == "protobuf"
                else len(json.loads(answer)["items"])
            )
            if count != pods:
                raise RuntimeError(f"{fmt} list holds {count} pods, not {pods}")
            per[fmt]["bytes"] = len(answer)
    return {
        fmt: {
            "rounds": rounds,
            "bytes": r["bytes"],
            # The first list encodes each object (protobuf keeps the encoding per object version);
            # the later ones are what a relist of an unchanged cache costs.
            "first_s": round(r["latencies"][0], 3),
            "first_server_cpu_ms": round(r["cpus"][0] * 1000, 1),
            "median_s": round(statistics.median(r["latencies"][1:] or r["latencies"]), 3),
            # a mean: /proc counts CPU in 10 ms ticks, too coarse for one list
            "server_cpu_ms_per_request": round(statistics.mean(r["cpus"][1:] or r["cpus"]) * 1000, 1),
        }
        for fmt, r in per.items()
    }


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="protobuf-bench-") as tmp, ApiServer(Path(tmp)) as server:
        ctx = ssl_context(server)
        conns = [await RawConnection.open(server.host, server.port, ctx) for _ in range(args.connections)]
        for fmt in FORMATS:
            ns = json.dumps({"metadata": {"name": fmt}}).encode()
            status, answer = await conns[0].request("POST", "/api/v1/namespaces", ns)
            if status != 201:
                raise RuntimeError(f"namespace: {status} {answer[:300]!r}")
        pid = server.pid or 0
        report: dict = {"pods": args.pods, "connections": args.connections}
        report["create"] = await creates(conns, args.pods, pid)
        report["list"] = await lists(conns[0], args.rounds, args.pods, pid)
        for conn in conns:
            conn.close()
        report["load_average_1m"] = os.getloadavg()[0]
        return report


def _ratio(json_cost: float, protobuf_cost: float) -> float:
    """JSON's cost over protobuf's; NaN when protobuf's is too small to measure (a smoke run)."""
    return json_cost / protobuf_cost if protobuf_cost > 0 else float("nan")


def markdown(report: dict) -> str:
    c, li = report["create"], report["list"]
    ratio_create = _ratio(c["json"]["server_cpu_ms_per_request"], c["protobuf"]["server_cpu_ms_per_request"])
    ratio_list = _ratio(li["json"]["server_cpu_ms_per_request"], li["protobuf"]["server_cpu_ms_per_request"])
    lines = [
        f"# Protobuf against JSON: {report['pods']} pods each, same server, interleaved",
        "",
        f"Load average {report['load_average_1m']:.1f}; {report['connections']} keep-alive connections for creates.",
        "",
        "| step | format | rate / latency | p99 or first | bytes | server CPU ms per request |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fmt in FORMATS:
        r = c[fmt]
        lines.append(
            f"| create | {fmt} | {r['rate_per_s']}/s, p50 {r['p50_ms']} ms | {r['p99_ms']} ms | - | "
            f"{r['server_cpu_ms_per_request']} |"
        )
    for fmt in FORMATS:
        r = li[fmt]
        lines.append(
            f"| list {report['pods']} | {fmt} | median {r['median_s']} s | first {r['first_s']} s "
            f"({r['first_server_cpu_ms']} ms CPU) | {r['bytes']} | {r['server_cpu_ms_per_request']} |"
        )
    lines += [
        "",
        f"JSON / protobuf server CPU: create {ratio_create:.2f}x, list (mean of the later rounds) {ratio_list:.2f}x "
        "(above 1: protobuf is cheaper; the goal is at least 1).",
    ]
    return "\n".join(lines) + "\n"


def svg(report: dict) -> str:
    bars = [(f"create {f}", report["create"][f]["server_cpu_ms_per_request"]) for f in FORMATS]
    bars += [(f"list {f} (/100)", report["list"][f]["server_cpu_ms_per_request"] / 100) for f in FORMATS]
    return bar_svg("API server CPU per request, JSON vs protobuf", bars, "ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=16)
    run_and_report(
        parser, "apiserver-protobuf", main, markdown, svg, smoke={"pods": 40, "rounds": 2, "connections": 4}
    )
