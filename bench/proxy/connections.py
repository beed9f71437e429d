"""New TCP connections per second and request latency through a ClusterIP vs straight to the pod IP,
in the same run (the issue's goal: >= 0.9x through the Service).

Two network namespaces of the run's own (tests/serviceproxy/netlab.py: the host's rules are never touched):
the client holds the proxy's table as the proxier writes it (rules.build for one Service with one
endpoint, written by the same Writer and `nft -f` the proxier uses), the backend a small asyncio server
that answers each line it reads. A client process in the client namespace opens a connection, sends a
line, reads the answer and closes, as fast as it can for a while (connections/s), then sends lines over
one connection (request latency p50/p99). Direct and ClusterIP rounds alternate, so both see the same
machine. Writes proxy-connections.{json,md,svg} (default bench/results/).

    sudo python3 bench/proxy/connections.py [--seconds 3] [--rounds 3] [--out DIR]
    sudo python3 bench/proxy/connections.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from serviceproxy.model import Endpoint, ServicePort, ServicePortName
from serviceproxy.nft import Nft
from serviceproxy.rules import NodeSettings, build
from serviceproxy.ruleset import Existing, Writer
from tests.serviceproxy.netlab import BACKEND_IP, NetLab

CLUSTER_IP, PORT, TARGET_PORT = "10.96.7.7", 80, 8080

SERVER = """
import asyncio, sys
async def handle(reader, writer):
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()
    writer.close()
async def main():
    host, port = sys.argv[1].rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port), backlog=1024, reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""

CLIENT = """
import json, socket, sys, time
host, port, seconds, requests = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
count, deadline = 0, time.monotonic() + seconds
started = time.monotonic()
while time.monotonic() < deadline:
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.sendall(b"x\\n")
        assert conn.recv(16) == b"x\\n"
    count += 1
rate = count / (time.monotonic() - started)
lat = []
with socket.create_connection((host, port), timeout=5) as conn:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(requests):
        t = time.perf_counter()
        conn.sendall(b"x\\n")
        assert conn.recv(16) == b"x\\n"
        lat.append(time.perf_counter() - t)
print(json.dumps({"conn_per_s": rate, "latencies": lat}))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def program(lab: NetLab, table: str) -> None:
    """The proxy's ruleset for one ClusterIP Service with one endpoint, in the client namespace."""
    name = ServicePortName("bench", "echo", "", "TCP")
    svc = ServicePort(name, CLUSTER_IP, PORT, 0, (), (), None, False, False)
    endpoint = Endpoint(BACKEND_IP, TARGET_PORT, True, True, False, "n1")
    ruleset = build([svc], {name: (endpoint,)}, NodeSettings("n1", "10.250.0.0/24"))
    await Nft(table, netns=lab.client).apply(Writer(table, "ip").full(ruleset, Existing()))


def run_client(lab: NetLab, host: str, port: int, seconds: float, requests: int) -> dict:
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            lab.client,
            sys.executable,
            "-c",
            CLIENT,
            host,
            str(port),
            str(seconds),
            str(requests),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    return json.loads(out.stdout)


def measure(seconds: float, rounds: int, requests: int) -> dict:
    lab = NetLab().open()
    table = "kube-proxy"
    server = subprocess.Popen(
        ["ip", "netns", "exec", lab.backend, sys.executable, "-c", SERVER, f"{BACKEND_IP}:{TARGET_PORT}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        asyncio.run(program(lab, table))
        results: dict[str, list[dict]] = {"direct": [], "cluster_ip": []}
        run_client(lab, BACKEND_IP, TARGET_PORT, min(seconds, 0.5), 10)  # warm up both paths
        run_client(lab, CLUSTER_IP, PORT, min(seconds, 0.5), 10)
        for _ in range(rounds):
            results["direct"].append(run_client(lab, BACKEND_IP, TARGET_PORT, seconds, requests))
            results["cluster_ip"].append(run_client(lab, CLUSTER_IP, PORT, seconds, requests))
    finally:
        server.terminate()
        server.wait(10)
        lab.close()
    figures: dict[str, float] = {}
    for path, runs in results.items():
        lat = [x for r in runs for x in r["latencies"]]
        figures[f"{path}_conn_per_s"] = round(statistics.median(r["conn_per_s"] for r in runs), 1)
        figures[f"{path}_latency_p50_ms"] = round(pct(lat, 0.50) * 1e3, 4)
        figures[f"{path}_latency_p99_ms"] = round(pct(lat, 0.99) * 1e3, 4)
    figures["conn_rate_ratio"] = round(figures["cluster_ip_conn_per_s"] / figures["direct_conn_per_s"], 3)
    figures["latency_p50_ratio"] = round(
        figures["cluster_ip_latency_p50_ms"] / figures["direct_latency_p50_ms"], 3
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="connection loop length per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="requests over one connection per round")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.seconds, args.rounds, args.requests = 0.3, 1, 50
    started = time.monotonic()
    figures = measure(args.seconds, args.rounds, args.requests)
    data = {"seconds": args.seconds, "rounds": args.rounds, "requests": args.requests, **figures}
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    markdown = (
        "# Service proxy dataplane: new connections and request latency, ClusterIP vs pod IP\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Baseline in the same run: the `direct_` figures (the client connecting straight to the backend's "
        "address); the `cluster_ip_` ones go through the proxy's nftables rules (DNAT in the output hook, "
        "conntrack). One client process, sequential connections (connect, one line each way, close); "
        f"latency over one kept connection. Rounds alternate the two paths; {args.rounds} round(s) of "
        f"{args.seconds} s each, {time.monotonic() - started:.0f} s in all, 2 cores.\n"
    )
    svg = bar_svg(
        "new TCP connections per second",
        [
            ("direct to the pod IP", figures["direct_conn_per_s"]),
            ("through the ClusterIP", figures["cluster_ip_conn_per_s"]),
        ],
        "connections/s",
    )
    write_report(out, "proxy-connections", data, markdown, svg)
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
