"""Requests per second and latency through the ingress controller's nginx to a pod, against straight to
the pod's address, in the same run (issue 34's goal: >= 0.8x through the proxy, the cost of one hop).

The proxy is the controller's own: its configuration built from an Ingress by `model.build` and
`nginxconf.render` and run by its `Nginx` (nginx -t, then started), the backend named by its ready
address as an EndpointSlice gives it, no Service hop. The "pod" is a second nginx answering a fixed 200
on the loopback address (a fast backend, so the figures show the hop, not the backend). One client
process at a time (Python's http.client): requests over one kept connection for a while (requests/s),
then a fixed number timed one by one (latency p50/p99). Direct and proxied rounds alternate, so both see
the same machine. Writes ingress-hop.{json,md,svg} (default bench/results/).

    python3 bench/ingress/hop.py [--seconds 3] [--rounds 3] [--requests 2000] [--out DIR]
    python3 bench/ingress/hop.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def pod_config(root: Path, port: int, address: str = "127.0.0.1") -> str:
    """The "pod": an nginx answering 200 "ok" (on the loopback address by default)."""
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
    }}
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


def run_client(port: int, seconds: float, requests: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), HOST, str(seconds), str(requests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 120,
    )
    return json.loads(out.stdout)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(work: Path, seconds: float, rounds: int, requests: int) -> dict:
    pod_root, proxy_root = work / "pod", work / "proxy"
    _dirs(pod_root)
    _dirs(proxy_root)
    pod_port = free_port()
    pod, proxy = Nginx(pod_root), Nginx(proxy_root)
    results: dict[str, list[dict]] = {"direct": [], "proxied": []}
    try:
        await pod.apply(pod_config(pod_root, pod_port))
        text, proxy_port = proxy_config(proxy_root, pod_port)
        await proxy.apply(text)
        ports = {"direct": pod_port, "proxied": proxy_port}
        for path in ports:  # warm up both
            await asyncio.to_thread(run_client, ports[path], min(seconds, 0.3), 10)
        for _ in range(rounds):
            for path, port in ports.items():
                results[path].append(await asyncio.to_thread(run_client, port, seconds, requests))
    finally:
        await proxy.stop()
        await pod.stop()
    figures: dict[str, float] = {}
    for path, runs in results.items():
        lat = [x for r in runs for x in r["latencies"]]
        figures[f"{path}_requests_per_s"] = round(statistics.median(r["requests_per_s"] for r in runs), 1)
        figures[f"{path}_latency_p50_ms"] = round(pct(lat, 0.50) * 1e3, 3)
        figures[f"{path}_latency_p99_ms"] = round(pct(lat, 0.99) * 1e3, 3)
    figures["hop_ratio_requests_per_s"] = round(
        figures["proxied_requests_per_s"] / figures["direct_requests_per_s"], 3
    )
    figures["latency_p50_added_ms"] = round(
        figures["proxied_latency_p50_ms"] - figures["direct_latency_p50_ms"], 3
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="request loop length per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="requests timed one by one per round")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.seconds, args.rounds, args.requests = 0.3, 1, 50
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ingress-hop-"))
    try:
        figures = asyncio.run(measure(work, args.seconds, args.rounds, args.requests))
        leaked = Scope.of(work).leaked()
        assert not leaked, f"left {leaked}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    data = {"seconds": args.seconds, "rounds": args.rounds, "requests": args.requests, **figures}
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    markdown = (
        "# Ingress proxy hop: requests per second and latency, through nginx vs straight to the pod\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Baseline in the same run: the `direct_` figures (the client asking the pod's address itself); the "
        "`proxied_` ones go through the controller's nginx, configured from an Ingress as the controller "
        "does (Host header hop.example, the pod's ready address as the upstream, a new upstream connection "
        "per request as the configuration has no upstream keepalive). One client process, HTTP/1.1 over one "
        f"kept connection; rounds alternate the two paths; {args.rounds} round(s) of {args.seconds} s and "
        f"{args.requests} timed requests, {time.monotonic() - started:.0f} s in all, on a shared 2-core "
        "machine. Goal: hop_ratio_requests_per_s >= 0.8.\n"
    )
    svg = bar_svg(
        "HTTP requests per second",
        [
            ("direct to the pod", figures["direct_requests_per_s"]),
            ("through the ingress nginx", figures["proxied_requests_per_s"]),
        ],
        "requests/s",
    )
    write_report(out, "ingress-hop", data, markdown, svg)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
