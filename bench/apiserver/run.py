"""API server benchmarks (issue 3): figures are reported, never asserted.

  python bench/apiserver/run.py [--nodes 5000 --rate 500 --seconds 20 --pods 10000 --watchers 1000] [--out DIR]
  python bench/apiserver/run.py --smoke --out DIR    # 20 leases at 20/s for 1 s, 20 pods, 5 watchers

(a) lease renewals: 5 000 leases in kube-node-lease, renewed by PUT at a fixed open-loop rate (the
    upstream kubelet cadence: 5 000 nodes / 10 s = 500 updates/s); p50/p99 latency.
(b) list 10 000 pods: full JSON list, consistent (resourceVersion unset) and from cache (rv=0).
(c) 1 000 concurrent watchers: time from a write's acknowledgement to its event at the last watcher.

The server runs as a subprocess through the rig (HTTPS, client-certificate auth, SQLite store), the
load generator is one asyncio process on the same 2-core machine, so both share the CPU.
Writes apiserver.{json,md,svg} (default bench/results/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import bar_svg, run_and_report
from pykubelet.rig.apiserver import ApiServer

_RV = re.compile(rb'"resourceVersion":"(\d+)"')


class RawConnection:
    """Minimal HTTP/1.1 keep-alive client: a fraction of aiohttp's CPU per request."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int, ctx: ssl.SSLContext) -> RawConnection:
        reader, writer = await asyncio.open_connection(host, port, ssl=ctx, server_hostname="localhost")
        return cls(reader, writer)

    async def request(
        self,
        method: str,
        path: str,
        body: bytes,
        content_type: str = "application/json",
        accept: str = "",
        authorization: str = "",
    ) -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
            + (f"Accept: {accept}\r\n" if accept else "")
            + (f"Authorization: {authorization}\r\n" if authorization else "")
            + f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        headers = await self.reader.readuntil(b"\r\n\r\n")
        status = int(headers[9:12])
        length = 0
        for line in headers.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


def cpu_seconds(pid: int) -> float:
    """User+system CPU time of a process: a figure other load on the machine does not inflate much."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ssl_context(server: ApiServer) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server.ca_cert))
    ctx.load_cert_chain(server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")
    return ctx


async def bulk(session: aiohttp.ClientSession, url: str, bodies: list[dict], concurrency: int = 64) -> None:
    queue = list(reversed(bodies))

    async def worker() -> None:
        while queue:
            body = queue.pop()
            async with session.post(url, json=body) as resp:
                if resp.status != 201:
                    raise RuntimeError(f"create failed {resp.status}: {await resp.text()}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def schedule(
    queue: asyncio.Queue[tuple[int, float] | None], total: int, rate: float, workers: list[asyncio.Task[None]]
) -> None:
    """Open loop: request i goes on `queue` (with its scheduled time) at `i / rate` seconds from now,
    whatever the answers do; then each worker is told to stop and is waited for."""
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        delay = target - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((i, target))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)


async def bench_leases(
    server: ApiServer,
    session: aiohttp.ClientSession,
    nodes: int,
    rate: float,
    seconds: float,
    connections: int = 64,
) -> dict:
    url = f"{server.url}/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    await bulk(
        session,
        url,
        [
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": f"node-{i}"},
                "spec": {"holderIdentity": f"node-{i}", "leaseDurationSeconds": 40, "renewTime": now},
            }
            for i in range(nodes)
        ],
    )
    async with session.get(url) as resp:
        leases = {item["metadata"]["name"]: item for item in (await resp.json())["items"]}
    latencies: list[float] = []
    errors = 0
    total = int(rate * seconds)
    pid = server.pid
    assert pid is not None
    # A lean client (raw HTTP/1.1 on persistent TLS connections) so that the load generator, which
    # shares the 2 cores with the server, can keep the schedule; latency counts from the scheduled
    # send time, so client-side queueing is charged to the result, not hidden.
    ctx = ssl_context(server)
    conns = [await RawConnection.open("127.0.0.1", server.port, ctx) for _ in range(connections)]
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"

    async def worker(conn: RawConnection) -> None:
        nonlocal errors
        while (item := await queue.get()) is not None:
            i, scheduled = item
            name = f"node-{i % nodes}"
            lease = leases[name]
            lease["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            status, body = await conn.request("PUT", path + name, json.dumps(lease).encode())
            latencies.append(time.perf_counter() - scheduled)
            if status == 200:
                lease["metadata"]["resourceVersion"] = _RV.search(body).group(1).decode()  # type: ignore[union-attr]
            else:
                errors += 1

    workers = [asyncio.create_task(worker(c)) for c in conns]
    cpu_before = cpu_seconds(pid)
    start = time.perf_counter()
    await schedule(queue, total, rate, workers)
    for conn in conns:
        conn.close()
    elapsed = time.perf_counter() - start
    server_cpu = cpu_seconds(pid) - cpu_before
    return {
        "server_cpu_ms_per_request": round(server_cpu / total * 1000, 3),
        "server_cpu_percent_of_one_core": round(server_cpu / elapsed * 100, 1),
        "load_average_1m": os.getloadavg()[0],
        "leases": nodes,
        "target_rate": rate,
        "requests": total,
        "achieved_rate": round(total / elapsed, 1),
        "errors": errors,
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
    }


async def bench_list(server: ApiServer, session: aiohttp.ClientSession, pods: int) -> dict:
    await session.post(
        f"{server.url}/api/v1/namespaces",
        json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}},
    )
    url = f"{server.url}/api/v1/namespaces/bench/pods"
    t0 = time.perf_counter()
    await bulk(
        session,
        url,
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "labels": {"app": f"a{i % 10}"}},
                "spec": {
                    "nodeName": f"node-{i % 5000}",
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
            for i in range(pods)
        ],
    )
    create_s = time.perf_counter() - t0
    assert server.pid is not None
    out: dict = {
        "pods": pods,
        "create_rate_per_s": round(pods / create_s, 1),
        "server_rss_mb": rss_mb(server.pid),
    }
    for label, query in (("consistent", ""), ("rv0", "?resourceVersion=0"), ("all_namespaces", "")):
        target = f"{server.url}/api/v1/pods{query}" if label == "all_namespaces" else url + query
        times = []
        size = 0
        for _ in range(5):
            t0 = time.perf_counter()
            async with session.get(target) as resp:
                data = await resp.read()
            times.append(time.perf_counter() - t0)
            size = len(data)
        count = len(json.loads(data)["items"])
        out[label] = {
            "items": count,
            "bytes": size,
            "median_s": round(statistics.median(times), 3),
            "max_s": round(max(times), 3),
        }
    out["load_average_1m"] = os.getloadavg()[0]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        async with session.get(f"{url}?fieldSelector=spec.nodeName%3Dnode-7") as resp:
            await resp.read()
        times.append(time.perf_counter() - t0)
    out["field_selector_one_node_median_s"] = round(statistics.median(times), 4)
    return out


async def bench_watchers(server: ApiServer, ctx: ssl.SSLContext, watchers: int, rounds: int) -> dict:
    url = f"{server.url}/api/v1/namespaces/default/configmaps"
    connector = aiohttp.TCPConnector(ssl=ctx, limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=None)
    ) as session:
        async with session.post(
            url,
            json={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "watched"},
                "data": {"n": "0"},
            },
        ) as resp:
            rv = (await resp.json())["metadata"]["resourceVersion"]
        arrivals: list[dict[str, float]] = [{} for _ in range(watchers)]
        ready = 0

        async def watch(i: int) -> None:
            nonlocal ready
            async with session.get(
                url, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "600"}
            ) as resp:
                ready += 1
                async for line in resp.content:
                    event = json.loads(line)
                    value = event["object"].get("data", {}).get("n")
                    arrivals[i][value] = time.perf_counter()

        tasks = [asyncio.create_task(watch(i)) for i in range(watchers)]
        t0 = time.perf_counter()
        while ready < watchers:
            await asyncio.sleep(0.05)
        connect_s = time.perf_counter() - t0
        await asyncio.sleep(1)
        results = []
        for r in range(1, rounds + 1):
            sent = time.perf_counter()
            async with session.patch(
                f"{url}/watched",
                data=json.dumps({"data": {"n": str(r)}}),
                headers={"Content-Type": "application/merge-patch+json"},
            ) as resp:
                await resp.read()
            acked = time.perf_counter()
            deadline = time.perf_counter() + 30
            while any(str(r) not in a for a in arrivals) and time.perf_counter() < deadline:
                await asyncio.sleep(0.005)
            last = max(a.get(str(r), float("inf")) for a in arrivals)
            first = min(a.get(str(r), float("inf")) for a in arrivals)
            results.append(
                {
                    "write_ack_ms": round((acked - sent) * 1000, 1),
                    "first_ms": round((first - sent) * 1000, 1),
                    "last_ms": round((last - sent) * 1000, 1),
                }
            )
            await asyncio.sleep(0.5)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "watchers": watchers,
        "connect_all_s": round(connect_s, 2),
        "rounds": results,
        "load_average_1m": os.getloadavg()[0],
        "last_watcher_median_ms": statistics.median(r["last_ms"] for r in results),
    }


async def main(args: argparse.Namespace) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="apiserver-bench-") as tmp,
        ApiServer(Path(tmp) / "data") as server,
    ):
        ctx = ssl_context(server)
        report: dict = {}
        connector = aiohttp.TCPConnector(ssl=ctx, limit=args.connections)
        async with aiohttp.ClientSession(connector=connector) as session:
            if args.rate:
                report["a_lease_renewals"] = await bench_leases(
                    server, session, args.nodes, args.rate, args.seconds, args.connections
                )
                print(json.dumps(report["a_lease_renewals"]), flush=True)
            if args.pods:
                report["b_list_pods"] = await bench_list(server, session, args.pods)
                print(json.dumps(report["b_list_pods"]), flush=True)
        if args.watchers:
            report["c_watchers"] = await bench_watchers(server, ctx, args.watchers, args.watch_rounds)
            print(json.dumps(report["c_watchers"]), flush=True)
        return report


def markdown(report: dict) -> str:
    lines = ["# API server benchmarks", "", "| benchmark | figures |", "| --- | --- |"]
    if "a_lease_renewals" in report:
        a = report["a_lease_renewals"]
        lines.append(
            f"| (a) {a['leases']} leases renewed by PUT at {a['target_rate']:g}/s ({a['requests']} requests) "
            f"| achieved {a['achieved_rate']}/s, p50 {a['p50_ms']} ms, p99 {a['p99_ms']} ms, max {a['max_ms']} ms, "
            f"{a['errors']} errors; server CPU {a['server_cpu_ms_per_request']} ms per renewal "
            f"({a['server_cpu_percent_of_one_core']} % of one core); load average {a['load_average_1m']:.1f} |"
        )
    if "b_list_pods" in report:
        b = report["b_list_pods"]
        lines.append(
            f"| (b) list {b['pods']} pods ({b['consistent']['bytes'] / 1e6:.1f} MB JSON) "
            f"| consistent {b['consistent']['median_s']} s median; rv=0 {b['rv0']['median_s']} s; all namespaces "
            f"{b['all_namespaces']['median_s']} s; fieldSelector spec.nodeName for one node "
            f"{b['field_selector_one_node_median_s']} s; created at {b['create_rate_per_s']}/s; server RSS "
            f"{b['server_rss_mb']} MB |"
        )
    if "c_watchers" in report:
        c = report["c_watchers"]
        last = ", ".join(str(r["last_ms"]) for r in c["rounds"])
        lines.append(
            f"| (c) {c['watchers']} watchers, one write | last watcher {c['last_watcher_median_ms']} ms median "
            f"(rounds: {last} ms); all connected in {c['connect_all_s']} s |"
        )
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = []
    if "a_lease_renewals" in report:
        a = report["a_lease_renewals"]
        bars += [("(a) lease renewal p50", a["p50_ms"]), ("(a) lease renewal p99", a["p99_ms"])]
    if "b_list_pods" in report:
        b = report["b_list_pods"]
        bars += [
            (f"(b) list {b['pods']} pods, {k}", b[k]["median_s"] * 1000)
            for k in ("consistent", "rv0", "all_namespaces")
        ]
    if "c_watchers" in report:
        c = report["c_watchers"]
        bars.append((f"(c) write to last of {c['watchers']} watchers", float(c["last_watcher_median_ms"])))
    return bar_svg("API server", bars, "ms")


SMOKE = {
    "nodes": 20,
    "rate": 20.0,
    "seconds": 1.0,
    "pods": 20,
    "watchers": 5,
    "watch_rounds": 2,
    "connections": 4,
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--watchers", type=int, default=1000)
    parser.add_argument("--watch-rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    run_and_report(parser, "apiserver", main, markdown, svg_plot, SMOKE)
