"""API priority and fairness benchmark (issue 20). Figures are reported, never asserted.

  python bench/apiserver/apf.py [--seconds 20 --flooders 32 --rounds 4] [--out DIR]
  python bench/apiserver/apf.py --smoke --out DIR

(a) exempt latency under a flood: on one server, a system:masters client GETs a ConfigMap in a closed
    loop, in windows without and with a flood, interleaved (quiet, flood, quiet, flood, ...). The flood
    is a low-priority user (a FlowSchema sending it to a level of one share, 3 seats, Reject) whose
    connections each send LISTs that hold their seat (a resourceVersion from the future: the watch
    cache's 3 s wait) in a tight loop, so nearly all of it is answered 429 at once, as fast as the
    server can refuse. The flood runs in its own process. Figures: the exempt GET's p50 and p99 in both
    kinds of window (goal: p99 under the flood < 100 ms), the flood's requests and 429s per second.
(b) what the filter costs an ordinary request: the same GET against a server with
    --enable-priority-and-fairness=false, interleaved windows, as the administrator (exempt level)
    and as an ordinary user (global-default level, a seat taken and given back); p50 and p99 of each.
Servers run as subprocesses through the rig, pinned to one core; the clients use the other.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from pykubelet.rig.apiserver import ApiServer

NAMESPACE = "bench"
FLOODER = "bench-flooder"
USER = "bench-user"
SERVER_CPU, CLIENT_CPU = 0, 1
FC = "/apis/flowcontrol.apiserver.k8s.io/v1"


def context(server: ApiServer, cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(server.ca_cert))
    ctx.load_cert_chain(cert, key)
    return ctx


def admin_context(server: ApiServer) -> ssl.SSLContext:
    return context(server, server.data_dir / "pki" / "admin.crt", server.data_dir / "pki" / "admin.key")


def user_files(server: ApiServer, user: str, tmp: Path) -> tuple[Path, Path]:
    kubeconfig = server.client_kubeconfig(user, (), tmp / f"{user}-{server.port}" / "kubeconfig")
    return kubeconfig.parent / f"{user}.crt", kubeconfig.parent / f"{user}.key"


async def post(conn: RawConnection, path: str, body: dict) -> None:
    status, text = await conn.request("POST", path, json.dumps(body).encode())
    assert status in (201, 409), text


async def populate(server: ApiServer) -> None:
    """The namespace and ConfigMap the clients read, the flooder's tiny level and schema, and RBAC
    (cluster-admin: a bare server aggregates no `view`) for both users."""
    conn = await RawConnection.open("127.0.0.1", server.port, admin_context(server))
    await post(
        conn, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    await post(
        conn,
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v" * 256}},
    )
    for user in (FLOODER, USER):
        await post(
            conn,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": user},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
            },
        )
    await post(
        conn,
        f"{FC}/prioritylevelconfigurations",
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": "bench-tiny"},
            "spec": {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}},
            },
        },
    )
    await post(
        conn,
        f"{FC}/flowschemas",
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": "bench-flood"},
            "spec": {
                "priorityLevelConfiguration": {"name": "bench-tiny"},
                "matchingPrecedence": 50,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [{"kind": "User", "user": {"name": FLOODER}}],
                        "resourceRules": [
                            {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}
                        ],
                    }
                ],
            },
        },
    )
    conn.close()


async def closed_loop(port: int, ctx: ssl.SSLContext, seconds: float) -> list[float]:
    """One connection GETting the ConfigMap back to back for `seconds`; the latencies."""
    conn = await RawConnection.open("127.0.0.1", port, ctx)
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps/cm"
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        status, _ = await conn.request("GET", path, b"")
        latencies.append(time.perf_counter() - start)
        assert status == 200, status
    conn.close()
    return latencies


def _flood_process(
    port: int, ca: str, cert: str, key: str, flooders: int, seconds: float, out: object
) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU}) if (os.cpu_count() or 1) > 1 else None
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    path = f"/api/v1/namespaces/{NAMESPACE}/configmaps?resourceVersion=999999999&resourceVersionMatch=NotOlderThan"

    async def run() -> dict[str, int]:
        counts: dict[str, int] = {}
        deadline = time.monotonic() + seconds

        async def worker() -> None:
            conn = await RawConnection.open("127.0.0.1", port, ctx)
            while time.monotonic() < deadline:
                status, _ = await conn.request("GET", path, b"")
                counts[str(status)] = counts.get(str(status), 0) + 1
            conn.close()

        await asyncio.gather(*(worker() for _ in range(flooders)))
        return counts

    out.put(asyncio.run(run()))  # type: ignore[attr-defined]


def summary(latencies: list[float]) -> dict:
    return {
        "requests": len(latencies),
        "p50_ms": round(pct(latencies, 50) * 1000, 3),
        "p99_ms": round(pct(latencies, 99) * 1000, 3),
    }


async def exempt_under_flood(
    server: ApiServer, tmp: Path, seconds: float, rounds: int, flooders: int
) -> dict:
    ctx = admin_context(server)
    cert, key = user_files(server, FLOODER, tmp)
    await closed_loop(server.port, ctx, min(1.0, seconds / rounds))  # warm up
    quiet: list[float] = []
    flooded: list[float] = []
    flood_counts: dict[str, int] = {}
    flood_seconds = 0.0
    window = seconds / rounds
    cpu0 = cpu_seconds(server.pid or 0)
    for _ in range(rounds):
        quiet += await closed_loop(server.port, ctx, window)
        results: multiprocessing.Queue = multiprocessing.Queue()
        proc = multiprocessing.Process(
            target=_flood_process,
            args=(server.port, str(server.ca_cert), str(cert), str(key), flooders, window + 1.0, results),
        )
        proc.start()
        await asyncio.sleep(0.5)  # the flood at full strength before the window opens
        flooded += await closed_loop(server.port, ctx, window)
        counts = await asyncio.to_thread(results.get)
        await asyncio.to_thread(proc.join)
        for code, n in counts.items():
            flood_counts[code] = flood_counts.get(code, 0) + n
        flood_seconds += window + 1.0
    total = sum(flood_counts.values())
    return {
        "window_seconds": window,
        "rounds": rounds,
        "flooders": flooders,
        "quiet": summary(quiet),
        "flood": summary(flooded),
        "flood_requests_per_s": round(total / flood_seconds, 1),
        "flood_429_per_s": round(flood_counts.get("429", 0) / flood_seconds, 1),
        "flood_status_counts": flood_counts,
        "server_cpu_s": round(cpu_seconds(server.pid or 0) - cpu0, 2),
        "load_average_1m": os.getloadavg()[0],
    }


async def filter_cost(on: ApiServer, off: ApiServer, tmp: Path, seconds: float, rounds: int) -> dict:
    out: dict = {}
    for who in ("admin (exempt)", "user (global-default)"):
        contexts = {}
        for label, server in (("apf_on", on), ("apf_off", off)):
            if who.startswith("admin"):
                contexts[label] = (server, admin_context(server))
            else:
                contexts[label] = (server, context(server, *user_files(server, USER, tmp)))
        runs: dict[str, list[float]] = {"apf_on": [], "apf_off": []}
        for server, ctx in contexts.values():
            await closed_loop(server.port, ctx, min(1.0, seconds / rounds))  # warm up
        for _ in range(rounds):
            for label, (server, ctx) in contexts.items():
                runs[label] += await closed_loop(server.port, ctx, seconds / rounds / 2)
        out[who] = {label: summary(lat) for label, lat in runs.items()}
        out[who]["p50_added_ms"] = round(out[who]["apf_on"]["p50_ms"] - out[who]["apf_off"]["p50_ms"], 3)
    return out


def _pin(pid: int | None, cpu: int) -> None:
    if pid is not None and (os.cpu_count() or 1) > 1:
        try:
            os.sched_setaffinity(pid, {cpu})
        except OSError:
            pass


async def main(args: argparse.Namespace) -> dict:
    _pin(os.getpid(), CLIENT_CPU)
    with tempfile.TemporaryDirectory(prefix="apf-bench-") as name:
        tmp = Path(name)
        on = ApiServer(tmp / "on")
        off = ApiServer(tmp / "off", extra_args=["--enable-priority-and-fairness=false"])
        try:
            for server in (on, off):
                server.start()
                _pin(server.pid, SERVER_CPU)
                await populate(server)
            flood = await exempt_under_flood(on, tmp, args.seconds, args.rounds, args.flooders)
            print(json.dumps(flood), flush=True)
            cost = await filter_cost(on, off, tmp, args.seconds, args.rounds)
            print(json.dumps(cost), flush=True)
        finally:
            for server in (on, off):
                server.stop()
    return {"a_exempt_under_flood": flood, "b_filter_cost": cost}


def markdown(report: dict) -> str:
    a, b = report["a_exempt_under_flood"], report["b_filter_cost"]
    lines = [
        "# API priority and fairness",
        "",
        f"(a) a system:masters GET in a closed loop, {a['rounds']} quiet and {a['rounds']} flood windows of "
        f"{a['window_seconds']:.1f} s interleaved; the flood: {a['flooders']} connections of a user on a "
        f"3-seat Reject level, {a['flood_requests_per_s']} requests/s, {a['flood_429_per_s']} of them 429/s "
        f"(goal: p99 under the flood < 100 ms)",
        "",
        "| window | requests | p50 ms | p99 ms |",
        "| --- | --- | --- | --- |",
        f"| quiet | {a['quiet']['requests']} | {a['quiet']['p50_ms']} | {a['quiet']['p99_ms']} |",
        f"| flood | {a['flood']['requests']} | {a['flood']['p50_ms']} | {a['flood']['p99_ms']} |",
        "",
        "(b) the same GET against a server with --enable-priority-and-fairness=false, windows interleaved",
        "",
        "| who | APF | requests | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for who, runs in b.items():
        for label in ("apf_on", "apf_off"):
            r = runs[label]
            lines.append(f"| {who} | {label} | {r['requests']} | {r['p50_ms']} | {r['p99_ms']} |")
    lines.append("")
    lines.append(f"load average (1 min) at the end of (a): {a['load_average_1m']:.2f}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="total seconds of each kind of window")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--flooders", type=int, default=32, help="connections of the flood")
    add_run_options(parser)
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds, args.flooders = 2.0, 1, 8
    out = out_dir(parser, args)
    report = asyncio.run(main(args))
    a = report["a_exempt_under_flood"]
    bars = [("exempt p99, quiet", a["quiet"]["p99_ms"]), ("exempt p99, flood", a["flood"]["p99_ms"])]
    for who, runs in report["b_filter_cost"].items():
        bars += [
            (f"{who} p50, APF on", runs["apf_on"]["p50_ms"]),
            (f"{who} p50, APF off", runs["apf_off"]["p50_ms"]),
        ]
    write_report(
        out, "apiserver-apf", report, markdown(report), bar_svg("API priority and fairness", bars, "ms")
    )
