"""Requests per second and latency through the ingress controller's nginx to a pod, against straight to
the pod's address, in the same run (issue 34's goal: >= 0.8x through the proxy, the cost of one hop).

The proxy is the controller's own: its configuration built from an Ingress by `model.build` and
`nginxconf.render` and run by its `Nginx` (nginx -t, then started), the backend named by its ready
address as an EndpointSlice gives it, no Service hop. Beside it runs the configuration as the controller
rendered it before (`as_before`: one worker, 32 idle upstream connections per worker, buffered answers),
its figures `before_*`. The "pod" is a second nginx answering a fixed 200 on the loopback address (a
fast backend, so the figures show the hop, not the backend); its stub_status counts the connections it
accepted, so the upstream connections the proxy opened per 1 000 requests are a figure too (like with
like: the client keeps one connection either way, so must the proxy).

Two clients, each path asked in turn, rounds alternating, so all see the same machine:
- the issue's figures (`direct_`, `proxied_`, `before_proxied_`): one client process at a time (Python's
  http.client) over one kept connection, requests one after another for a while (requests/s), then a
  fixed number timed one by one (latency p50/p99). One request at a time is a latency figure: each
  request waits for the client, the pod and (proxied) the proxy twice to be scheduled in turn;
- `concurrent_*`: wrk (Debian's) with CONNECTIONS kept connections, what "requests per second" means
  for a server (requests in flight together, so no process waits on another for each one), with the
  CPU each process spent per request (client, proxy, pod).
Writes ingress-hop.{json,md,svg} (default bench/results/).

    python3 bench/ingress/hop.py [--seconds 3] [--rounds 3] [--requests 2000] [--connections 64] [--out DIR]
    python3 bench/ingress/hop.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from ingresscontroller import model
from ingresscontroller.nginx import Nginx
from ingresscontroller.nginxconf import Files, Listen, render
from kubeclient.serving import ensure_self_signed
from pykubelet.rig.leaks import Scope
from pykubelet.rig.process import free_port

HOST = "hop.example"

CLIENT = """
import http.client, json, sys, time
port, host, seconds, requests = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
def get():
    conn.request("GET", "/", headers={"Host": host})
    answer = conn.getresponse()
    assert answer.status == 200 and answer.read() == b"ok\\n", answer.status
count, started = 0, time.monotonic()
while time.monotonic() - started < seconds:
    get()
    count += 1
rate = count / (time.monotonic() - started)
lat = []
for _ in range(requests):
    t = time.perf_counter()
    get()
    lat.append(time.perf_counter() - t)
print(json.dumps({"requests_per_s": rate, "latencies": lat}))
"""


def _dirs(root: Path) -> None:
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (root / "tmp" / kind).mkdir(parents=True, exist_ok=True)


def pod_config(root: Path, port: int, address: str = "127.0.0.1", status_port: int = 0) -> str:
    """The "pod": an nginx answering 200 "ok" (on the loopback address by default); with `status_port`,
    its stub_status there (connections accepted, requests)."""
    status = (
        f"""
    server {{
        listen 127.0.0.1:{status_port};
        location = /status {{
            stub_status;
        }}
    }}"""
        if status_port
        else ""
    )
    temp = "\n".join(
        f'    {k}_temp_path "{root}/tmp/{k}";' for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
worker_processes 1;
user www-data;
pid "{root}/nginx.pid";
error_log "{root}/error.log" notice;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
{temp}
    server {{
        listen {address}:{port};
        location / {{
            return 200 "ok\\n";
        }}
    }}{status}
}}
"""


def proxy_config(root: Path, pod_port: int) -> tuple[str, int]:
    """The controller's configuration for one Ingress (host hop.example, path /) to the pod; its port."""
    cert, key = ensure_self_signed(root / "certs", "ingress.local", [], "default-fake")
    ingress = {
        "metadata": {"name": "hop", "namespace": "bench", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "rules": [
                {
                    "host": HOST,
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "pod", "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ]
        },
    }
    cluster = model.Cluster(
        services={"bench/pod": {"metadata": {"name": "pod"}, "spec": {"ports": [{"port": 80}]}}},
        slices={
            "bench/pod": [
                {
                    "addressType": "IPv4",
                    "ports": [{"name": "", "port": pod_port}],
                    "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
                }
            ]
        },
        secrets={},
    )
    config = model.build([ingress], cluster, lambda _c, _k: None)
    assert config.served == ["bench/hop"], config.problems
    listen = Listen("127.0.0.1", free_port(), free_port())
    return render(config, listen, Files(root, cert, key)), listen.http_port


def as_before(text: str) -> str:
    """The proxy's configuration as the controller rendered it before: one worker, 32 idle connections
    to an upstream per worker, nginx's default 1 000 requests per upstream connection and 60 s idle,
    answers buffered."""
    out = text.replace("worker_processes auto;", "worker_processes 1;").replace(
        "keepalive 320;", "keepalive 32;"
    )
    dropped = ("proxy_buffering off;", "keepalive_requests ", "keepalive_timeout ")
    return "\n".join(line for line in out.split("\n") if not line.strip().startswith(dropped))


def run_client(port: int, seconds: float, requests: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), HOST, str(seconds), str(requests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 120,
    )
    return json.loads(out.stdout)


def run_wrk(port: int, seconds: float, connections: int) -> dict:
    """wrk's requests/s, p99 and request count over `connections` kept connections, and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-H", f"Host: {HOST}"]
        + [f"http://127.0.0.1:{port}/"],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", out)
    assert errors is None, out
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    assert p99 is not None, out
    return {
        "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),  # type: ignore[union-attr]
        "requests": int(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
        "p99_ms": float(p99.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[p99.group(2)],
        "cpu_s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
    }


def cpu_seconds(nginx: Nginx) -> float:
    """CPU seconds an nginx's master and workers spent so far."""
    assert nginx.proc is not None
    pid = nginx.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0
    for each in (pid, *map(int, children)):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def accepted(status_port: int) -> int:
    """Connections the pod accepted so far (its stub_status)."""
    conn = http.client.HTTPConnection("127.0.0.1", status_port, timeout=5)
    try:
        conn.request("GET", "/status")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return int(text.split("\n")[2].split()[0])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


PATHS = ("direct", "proxied", "before_proxied")


def _summary(prefix: str, runs: list[dict]) -> dict[str, float]:
    lat = [x for r in runs for x in r["latencies"]]
    return {
        f"{prefix}_requests_per_s": round(statistics.median(r["requests_per_s"] for r in runs), 1),
        f"{prefix}_latency_p50_ms": round(pct(lat, 0.50) * 1e3, 3),
        f"{prefix}_latency_p99_ms": round(pct(lat, 0.99) * 1e3, 3),
    }


def _concurrent_summary(prefix: str, runs: list[dict]) -> dict[str, float]:
    requests = sum(r["requests"] for r in runs)
    figures = {
        f"concurrent_{prefix}_requests_per_s": round(statistics.median(r["requests_per_s"] for r in runs), 1),
        f"concurrent_{prefix}_latency_p99_ms": round(statistics.median(r["p99_ms"] for r in runs), 3),
    }
    for who in ("client", "proxy", "pod"):
        if any(who in r for r in runs):
            figures[f"concurrent_{prefix}_{who}_cpu_us_per_request"] = round(
                sum(r.get(who, 0.0) for r in runs) / requests * 1e6, 1
            )
    return figures


async def measure(work: Path, seconds: float, rounds: int, requests: int, connections: int) -> dict:
    roots = {name: work / name for name in ("pod", "proxy", "before")}
    for root in roots.values():
        _dirs(root)
    pod_port, status_port = free_port(), free_port()
    pod, proxy, before = (Nginx(root) for root in roots.values())
    serial: dict[str, list[dict]] = {path: [] for path in PATHS}
    concurrent: dict[str, list[dict]] = {path: [] for path in PATHS}
    opened: dict[str, list[tuple[int, int]]] = {"proxied": [], "before_proxied": []}
    try:
        await pod.apply(pod_config(roots["pod"], pod_port, status_port=status_port))
        text, proxy_port = proxy_config(roots["proxy"], pod_port)
        await proxy.apply(text)
        old_text, before_port = proxy_config(roots["before"], pod_port)
        await before.apply(as_before(old_text))
        ports = {"direct": pod_port, "proxied": proxy_port, "before_proxied": before_port}
        proxies = {"proxied": proxy, "before_proxied": before}
        for port in ports.values():  # warm up each
            await asyncio.to_thread(run_client, port, min(seconds, 0.3), 10)
        for _ in range(rounds):
            for path, port in ports.items():
                serial[path].append(await asyncio.to_thread(run_client, port, seconds, requests))
            for path, port in ports.items():
                nginx = proxies.get(path)
                cpu = (cpu_seconds(pod), cpu_seconds(nginx) if nginx else 0.0, accepted(status_port))
                run = await asyncio.to_thread(run_wrk, port, seconds, connections)
                run["client"] = run["cpu_s"]
                run["pod"] = cpu_seconds(pod) - cpu[0]
                if nginx is not None:
                    run["proxy"] = cpu_seconds(nginx) - cpu[1]
                    opened[path].append((accepted(status_port) - cpu[2] - 1, run["requests"]))
                concurrent[path].append(run)
    finally:
        await before.stop()
        await proxy.stop()
        await pod.stop()
    figures: dict[str, float] = {}
    for path in PATHS:
        figures.update(_summary(path, serial[path]))
    for prefix, path in (("", "proxied"), ("before_", "before_proxied")):
        figures[f"{prefix}hop_ratio_requests_per_s"] = round(
            figures[f"{path}_requests_per_s"] / figures["direct_requests_per_s"], 3
        )
        figures[f"{prefix}latency_p50_added_ms"] = round(
            figures[f"{path}_latency_p50_ms"] - figures["direct_latency_p50_ms"], 3
        )
    for path in PATHS:
        figures.update(_concurrent_summary(path, concurrent[path]))
    for prefix, path in (("", "proxied"), ("before_", "before_proxied")):
        figures[f"concurrent_{prefix}hop_ratio_requests_per_s"] = round(
            figures[f"concurrent_{path}_requests_per_s"] / figures["concurrent_direct_requests_per_s"], 3
        )
        conns, reqs = (sum(x) for x in zip(*opened[path], strict=True))
        figures[f"concurrent_{path}_upstream_connections_per_1000_requests"] = round(conns / reqs * 1e3, 2)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="request loop length per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="requests timed one by one per round")
    parser.add_argument("--connections", type=int, default=64, help="wrk's kept connections")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.seconds, args.rounds, args.requests, args.connections = 0.3, 1, 50, 4
    started = time.monotonic()
    load = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="ingress-hop-"))
    try:
        figures = asyncio.run(measure(work, args.seconds, args.rounds, args.requests, args.connections))
        leaked = Scope.of(work).leaked()
        assert not leaked, f"left {leaked}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures["load_average_1m_start"], figures["load_average_1m_end"] = load, os.getloadavg()[0]
    data = {"seconds": args.seconds, "rounds": args.rounds, "requests": args.requests, **figures}
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    markdown = (
        "# Ingress proxy hop: requests per second and latency, through nginx vs straight to the pod\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Baseline in the same run: the `direct_` figures (the client asking the pod's address itself); the "
        "`proxied_` ones go through the controller's nginx, configured from an Ingress as the controller "
        "does (Host header hop.example, the pod's ready address as the upstream, idle upstream connections "
        "kept: see upstream_connections_per_1000_requests); `before_proxied_` through the configuration as "
        "the controller rendered it before (one worker, 32 idle upstream connections per worker, buffered "
        "answers). The issue's figures: one client process, HTTP/1.1 over one kept connection, one request "
        "at a time (a latency figure: each request waits for three processes to be scheduled in turn when "
        f"proxied, two when direct); `concurrent_`: wrk over {args.connections} kept connections, with the "
        "CPU each process spent per request. Paths asked in turn, rounds alternating; "
        f"{args.rounds} round(s) of {args.seconds} s and {args.requests} timed requests, "
        f"{time.monotonic() - started:.0f} s in all, on a shared 2-core machine (load average at start and "
        "end in the table). Goal: hop_ratio_requests_per_s >= 0.8.\n"
    )
    svg = bar_svg(
        "HTTP requests per second",
        [
            ("one at a time, direct to the pod", figures["direct_requests_per_s"]),
            ("one at a time, through the ingress nginx", figures["proxied_requests_per_s"]),
            ("one at a time, through it as before", figures["before_proxied_requests_per_s"]),
            (f"{args.connections} connections, direct", figures["concurrent_direct_requests_per_s"]),
            (f"{args.connections} connections, through nginx", figures["concurrent_proxied_requests_per_s"]),
            (
                f"{args.connections} connections, as before",
                figures["concurrent_before_proxied_requests_per_s"],
            ),
        ],
        "requests/s",
    )
    write_report(out, "ingress-hop", data, markdown, svg)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
