"""Store benchmark (issue 19): lease renewals on etcd against SQLite, same run, same machine. Figures are
reported, never asserted.

  python bench/apiserver/stores.py [--nodes 5000 --rate 500 --seconds 20 --rounds 4] [--out DIR]
  python bench/apiserver/stores.py --smoke --out DIR     # 20 leases at 20/s, 1 s per store

Two API servers run at once, one on SQLite (its data dir) and one on a local etcd 3.4 (the rig's, TLS
with client certificates, as `pykubelet up --store etcd` runs it). Both hold the same `--nodes` Leases in
kube-node-lease; each is renewed by PUT at a fixed open-loop rate (the kubelet's cadence: 5 000 nodes /
10 s = 500/s), the two servers' windows interleaved (A B A B ...) so that drift in the machine's other
load falls on both. Latency counts from the scheduled send time, so client-side queueing is charged,
not hidden. Beside p50/p99: where the time goes, as CPU per renewal of the API server and of etcd, and
etcd's own WAL fsync and backend commit times (from its /metrics, before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, bulk, cpu_seconds, pct, schedule, ssl_context
from bench.perfprofile import Profile
from bench.reporting import bar_svg, run_and_report
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
_RV = re.compile(rb'"resourceVersion":"(\d+)"')
STORES = ("sqlite", "etcd")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


async def create_leases(server: ApiServer, nodes: int) -> dict[str, dict]:
    connector = aiohttp.TCPConnector(ssl=ssl_context(server), limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        await bulk(
            session,
            f"{server.url}{LEASES}",
            [
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": f"node-{i}"},
                    "spec": {"holderIdentity": f"node-{i}", "leaseDurationSeconds": 40, "renewTime": _now()},
                }
                for i in range(nodes)
            ],
            concurrency=32,
        )
        async with session.get(f"{server.url}{LEASES}") as resp:
            return {item["metadata"]["name"]: item for item in (await resp.json())["items"]}


async def renew(
    server: ApiServer,
    leases: dict[str, dict],
    rate: float,
    seconds: float,
    connections: int,
    extra_pids: dict[str, int],
) -> dict:
    """One window of open-loop renewals; CPU of the server and of `extra_pids` over the window."""
    names = sorted(leases)
    total = max(int(rate * seconds), 1)
    latencies: list[float] = []
    errors = 0
    conns = [
        await RawConnection.open("127.0.0.1", server.port, ssl_context(server)) for _ in range(connections)
    ]
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()

    async def worker(conn: RawConnection) -> None:
        nonlocal errors
        while (item := await queue.get()) is not None:
            i, scheduled = item
            lease = leases[names[i % len(names)]]
            lease["spec"]["renewTime"] = _now()
            status, body = await conn.request(
                "PUT", f"{LEASES}/{lease['metadata']['name']}", json.dumps(lease).encode()
            )
            latencies.append(time.perf_counter() - scheduled)
            if status == 200:
                lease["metadata"]["resourceVersion"] = _RV.search(body).group(1).decode()  # type: ignore[union-attr]
            else:
                errors += 1

    pids = {"apiserver": server.pid, **extra_pids}
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items() if p}
    workers = [asyncio.create_task(worker(c)) for c in conns]
    start = time.perf_counter()
    await schedule(queue, total, rate, workers)
    elapsed = time.perf_counter() - start
    for conn in conns:
        conn.close()
    cpu = {k: cpu_seconds(pids[k]) - v for k, v in cpu0.items()}
    return {"requests": total, "errors": errors, "elapsed_s": elapsed, "latencies": latencies, "cpu_s": cpu}


def etcd_metrics(etcd: Etcd) -> dict[str, float]:
    """etcd's WAL fsync and backend commit histograms (sum, count) from its /metrics."""
    with urllib.request.urlopen(f"{etcd.url}/metrics", context=etcd.ssl_context(), timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for name in ("etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"):
        for part in ("sum", "count"):
            match = re.search(rf"^{name}_{part} (\S+)$", text, re.M)
            out[f"{name}_{part}"] = float(match.group(1)) if match else 0.0
    return out


def combine(
    windows: list[dict], nodes: int, rate: float, before: dict | None = None, after: dict | None = None
) -> dict:
    latencies = [x for w in windows for x in w["latencies"]]
    requests = sum(w["requests"] for w in windows)
    elapsed = sum(w["elapsed_s"] for w in windows)
    cpu: dict[str, float] = {}
    for w in windows:
        for k, v in w["cpu_s"].items():
            cpu[k] = cpu.get(k, 0.0) + v
    out = {
        "leases": nodes,
        "target_rate": rate,
        "requests": requests,
        "achieved_rate": round(requests / elapsed, 1),
        "errors": sum(w["errors"] for w in windows),
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
        "max_ms": round(max(latencies) * 1000, 2),
        "cpu_ms_per_renewal": {k: round(v / requests * 1000, 3) for k, v in cpu.items()},
        "load_average_1m": os.getloadavg()[0],
    }
    if before is not None and after is not None:
        for name, label in (
            ("etcd_disk_wal_fsync_duration_seconds", "wal_fsync"),
            ("etcd_disk_backend_commit_duration_seconds", "backend_commit"),
        ):
            count = after[f"{name}_count"] - before[f"{name}_count"]
            total = after[f"{name}_sum"] - before[f"{name}_sum"]
            out[f"etcd_{label}_per_renewal"] = round(count / requests, 3)
            out[f"etcd_{label}_mean_ms"] = round(total / count * 1000, 3) if count else None
    return out


async def main(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="stores-bench-") as tmp:
        root = Path(tmp)
        etcd = Etcd(root / "etcd")
        servers: dict[str, ApiServer] = {}
        try:
            etcd.start()
            servers["sqlite"] = ApiServer(root / "sqlite")
            servers["etcd"] = ApiServer(root / "on-etcd", etcd=etcd)
            for server in servers.values():
                server.start()
            leases = {name: await create_leases(s, args.nodes) for name, s in servers.items()}
            extra = {"sqlite": {}, "etcd": {"etcd": etcd.pid or 0}}
            for name, server in servers.items():  # warm up (connections, caches): not counted
                await renew(
                    server, leases[name], args.rate, min(1.0, args.seconds), args.connections, extra[name]
                )
            windows: dict[str, list[dict]] = {name: [] for name in STORES}
            etcd_windows_metrics = []
            for _ in range(args.rounds):
                for name in STORES:
                    if name == "etcd":
                        start = etcd_metrics(etcd)
                    windows[name].append(
                        await renew(
                            servers[name],
                            leases[name],
                            args.rate,
                            args.seconds / args.rounds,
                            args.connections,
                            extra[name],
                        )
                    )
                    if name == "etcd":
                        etcd_windows_metrics.append((start, etcd_metrics(etcd)))
            # One more window per store under `perf` (not counted above: sampling costs a little): where
            # the API server's CPU goes.
            profiles = {}
            for name in STORES:
                with Profile(servers[name].pid or 0) as profile:
                    await renew(
                        servers[name],
                        leases[name],
                        args.rate,
                        args.profile_seconds,
                        args.connections,
                        extra[name],
                    )
                profiles[name] = profile.summary()
            summed_before = {
                k: sum(b[k] for b, _ in etcd_windows_metrics) for k in etcd_windows_metrics[0][0]
            }
            summed_after = {k: sum(a[k] for _, a in etcd_windows_metrics) for k in etcd_windows_metrics[0][1]}
            return {
                "sqlite": combine(windows["sqlite"], args.nodes, args.rate),
                "etcd": combine(windows["etcd"], args.nodes, args.rate, summed_before, summed_after),
                "rounds": args.rounds,
                "connections": args.connections,
                "profile": profiles,
            }
        finally:
            for server in servers.values():
                server.stop()
            etcd.stop()


def markdown(report: dict) -> str:
    lines = [
        "# Lease renewals: etcd against SQLite",
        "",
        f"{report['sqlite']['leases']} leases renewed by PUT at {report['sqlite']['target_rate']:g}/s, "
        f"{report['rounds']} interleaved windows per store, {report['connections']} connections.",
        "",
        "| store | achieved/s | p50 ms | p99 ms | max ms | errors | API server CPU ms/renewal | etcd CPU ms/renewal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in STORES:
        r = report[name]
        cpu = r["cpu_ms_per_renewal"]
        lines.append(
            f"| {name} | {r['achieved_rate']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | {r['errors']} "
            f"| {cpu.get('apiserver', 0)} | {cpu.get('etcd', '-')} |"
        )
    e = report["etcd"]
    lines += [
        "",
        f"etcd: {e.get('etcd_wal_fsync_per_renewal')} WAL fsyncs per renewal, mean {e.get('etcd_wal_fsync_mean_ms')} ms; "
        f"{e.get('etcd_backend_commit_per_renewal')} backend commits per renewal, mean {e.get('etcd_backend_commit_mean_ms')} ms. "
        f"Load average {e['load_average_1m']:.1f}.",
    ]
    profiles = report.get("profile") or {}
    if any(p["categories_pct"] for p in profiles.values()):
        names = sorted({c for p in profiles.values() for c in p["categories_pct"]})
        lines += [
            "",
            "Where the API server's CPU goes (perf samples during one more window per store, % of samples):",
            "",
            "| | " + " | ".join(STORES) + " |",
            "| --- |" + " --- |" * len(STORES),
        ]
        for c in sorted(names, key=lambda c: -profiles["etcd"]["categories_pct"].get(c, 0.0)):
            lines.append(
                f"| {c} | "
                + " | ".join(str(profiles[s]["categories_pct"].get(c, 0.0)) for s in STORES)
                + " |"
            )
    else:
        lines += ["", f"No profile: {'; '.join(p['skipped'] for p in profiles.values()) or 'not run'}."]
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    bars = []
    for name in STORES:
        bars += [(f"{name} p50", report[name]["p50_ms"]), (f"{name} p99", report[name]["p99_ms"])]
    return bar_svg("Lease renewal latency", bars, "ms")


SMOKE = {"nodes": 20, "rate": 20.0, "seconds": 1.0, "rounds": 1, "connections": 4, "profile_seconds": 1.0}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=20, help="per store, split over the rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--profile-seconds", type=float, default=5, help="one more window per store, under perf"
    )
    run_and_report(parser, "apiserver-stores", main, markdown, svg_plot, SMOKE)
