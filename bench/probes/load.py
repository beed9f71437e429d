"""The prober's cost with 110 pods (issue 6): agent CPU and probe latency, against same-run floors.

  python bench/probes/load.py [--pods 110] [--seconds 120] [--out bench/results]
  python bench/probes/load.py --smoke --out DIR     # 2 pods, 2 s windows: under a minute

One stack (registry, containerd, API server, agent), one run:
  1. 110 pods without probes, all Running: the agent's CPU over --seconds (the idle floor).
  2. The same 110 pods deleted and re-created with an exec readiness probe and an httpGet liveness
     probe, both every 10 s, all Ready: the agent's CPU over --seconds, and the probe durations the
     agent itself measured (/metrics/probes, histogram deltas over the window, p50/p99 interpolated
     within buckets as Prometheus' histogram_quantile does).
  3. The raw floor for httpGet: the same GET issued by this process to every pod IP, with the same
     code the agent uses, spread over 10 s like the probes are.
Goals (reported, never asserted): the agent under 5 % of one core; httpGet probe p99 under 50 ms.
Writes probes-load.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import ssl
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from agent.pods.labels import POD_UID
from agent.probes.exec import exec_probe
from agent.probes.http import http_probe
from agent.probes.metrics import BUCKETS
from bench.agent.startup import ProcWatch, delete_all, pct
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench"


@dataclass(frozen=True)
class Size:
    """How much to run: the full benchmark, or a smoke run that only proves it still works."""

    pods: int = 110
    seconds: float = 120.0  # each measuring window
    settle_seconds: float = 10.0  # for status writes and events before a window
    spread: float = 10.0  # the floor's GETs are spread over this long, like the probes (period 10 s)
    calls: int = 300  # per handler, for the CPU cost of one call


SMOKE = Size(pods=2, seconds=2.0, settle_seconds=1.0, spread=1.0, calls=10)
SERVE = "mkdir -p /www && echo ok > /www/healthz && touch /tmp/ready && exec httpd -f -p 8080 -h /www"


def pod_body(name: str, node: str, image: str, probes: bool) -> dict:
    container: dict = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", SERVE],
    }
    if probes:
        container["readinessProbe"] = {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 10}
        container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [container]},
    }


async def create_and_wait(client: KubeClient, n: int, node: str, image: str, probes: bool) -> list[dict]:
    """Create n pods at once; return them once every one is Ready (or Running, without probes)."""
    await asyncio.gather(
        *(
            client.create(f"/api/v1/namespaces/{NS}/pods", pod_body(f"p-{i}", node, image, probes))
            for i in range(n)
        )
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        pods = (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions") or []
            )
        ]
        if len(ready) == n:
            return ready
        await asyncio.sleep(2)
    raise RuntimeError("pods not ready within 600 s")


def parse_histograms(text: str) -> dict[str, list[float]]:
    """handler -> cumulative bucket counts (the BUCKETS bounds, then +Inf) from the exposition."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.startswith("prober_probe_duration_seconds_bucket{"):
            continue
        labels, value = line[len("prober_probe_duration_seconds_bucket{") :].rsplit("} ", 1)
        fields = dict(part.split("=", 1) for part in labels.split(","))
        handler = fields["handler"].strip('"')
        out.setdefault(handler, []).append(float(value))
    return out


def quantile(q: float, cumulative: list[float]) -> float:
    """histogram_quantile: linear interpolation inside the bucket holding the q-th observation."""
    total = cumulative[-1]
    if total == 0:
        return float("nan")
    rank = q * total
    bounds = [0.0, *BUCKETS]
    previous = 0.0
    for i, count in enumerate(cumulative[:-1]):
        if count >= rank:
            lower, upper = bounds[i], BUCKETS[i]
            inside = count - previous
            return lower + (upper - lower) * ((rank - previous) / inside if inside else 1.0)
        previous = count
    return BUCKETS[-1]


async def scrape(port: int, cert: Path, key: Path) -> str:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the agent's serving certificate is self-signed
    context.load_cert_chain(str(cert), str(key))
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{port}/metrics/probes", ssl=context) as resp,
    ):
        resp.raise_for_status()
        return await resp.text()


async def http_floor(pod_ips: list[str], spread: float) -> list[float]:
    """One GET per pod, spread over `spread` seconds like the agent's probes, same client code."""

    async def one(ip: str) -> float:
        await asyncio.sleep(random.uniform(0, spread))
        t0 = time.perf_counter()
        outcome = await http_probe(f"http://{ip}:8080/healthz", [], 1.0, "kube-probe/1.32")
        if not outcome.ok:
            raise RuntimeError(f"floor GET to {ip} failed: {outcome.output}")
        return time.perf_counter() - t0

    return list(await asyncio.gather(*(one(ip) for ip in pod_ips)))


async def client_cost(cri: CRIClient, container_id: str, pod_ip: str, calls: int) -> dict:
    """CPU (all threads of this process) per exec and per GET, made one at a time with the agent's own
    handler code: the part of the agent's per-probe CPU that is the calls themselves."""
    out: dict = {}
    for handler, call in (
        ("exec", lambda: exec_probe(cri, container_id, ["cat", "/tmp/ready"], 1.0)),
        ("httpGet", lambda: http_probe(f"http://{pod_ip}:8080/healthz", [], 1.0, "kube-probe/1.32")),
    ):
        await call()  # warm up (channel, imports)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            outcome = await call()
            if not outcome.ok:
                raise RuntimeError(f"{handler} failed: {outcome.output}")
        out[handler] = {
            "cpu_ms_per_call": round(1000 * (time.process_time() - cpu0) / calls, 3),
            "wall_ms_per_call": round(1000 * (time.perf_counter() - wall0) / calls, 3),
        }
    return out


async def window(pid: int, seconds: float) -> dict:
    watch = ProcWatch(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        watch.sample()
        await asyncio.sleep(1)
    return watch.result()


async def bench(stack: Stack, size: Size) -> dict:
    assert stack.images and stack.agent and stack.agent.pid and stack.apiserver and stack.containerd
    image = stack.images.busybox_pinned
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    cert_dir = stack.config.state_dir / "bench-client"
    stack.apiserver.client_kubeconfig("bench", ("system:masters",), cert_dir / "bench.kubeconfig")
    cert, key = cert_dir / "bench.crt", cert_dir / "bench.key"
    try:
        await client.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
    except ApiError as err:
        if not err.conflict:
            raise
    n, seconds = size.pods, size.seconds
    report: dict = {"pods": n, "window_seconds": seconds}
    await create_and_wait(client, n, stack.node_name, image, probes=False)
    await asyncio.sleep(size.settle_seconds)  # status writes and events settle
    report["no_probes"] = await window(stack.agent.pid, seconds)
    print(f"{n} pods, no probes: {json.dumps(report['no_probes'])}", flush=True)
    await delete_all(client)

    pods = await create_and_wait(client, n, stack.node_name, image, probes=True)
    await asyncio.sleep(size.settle_seconds)
    before = parse_histograms(await scrape(stack.kubelet_port, cert, key))
    print(f"measuring with probes, agent pid {stack.agent.pid}", flush=True)
    report["with_probes"] = await window(stack.agent.pid, seconds)
    after = parse_histograms(await scrape(stack.kubelet_port, cert, key))
    latency: dict = {}
    for handler, counts in after.items():
        delta = [a - b for a, b in zip(counts, before.get(handler, [0.0] * len(counts)), strict=True)]
        latency[handler] = {
            "probes": int(delta[-1]),
            "p50_ms": round(1000 * quantile(0.50, delta), 2),
            "p99_ms": round(1000 * quantile(0.99, delta), 2),
        }
    report["probe_latency"] = latency
    print(
        f"{n} pods with probes: {json.dumps(report['with_probes'])}; latency {json.dumps(latency)}",
        flush=True,
    )
    ips = [p["status"]["podIP"] for p in pods]
    floor = await http_floor(ips, size.spread)
    report["http_floor_ms"] = {
        "p50": round(1000 * pct(floor, 50), 2),
        "p99": round(1000 * pct(floor, 99), 2),
        "n": len(floor),
    }
    print(f"raw GET floor: {json.dumps(report['http_floor_ms'])}", flush=True)
    cri = await CRIClient.connect(stack.containerd.endpoint)
    try:
        uid = pods[0]["metadata"]["uid"]
        containers = await cri.list_containers(labels={POD_UID: uid})
        report["client_cost"] = await client_cost(cri, containers[0].id, ips[0], size.calls)
    finally:
        await cri.close()
    print(f"client cost per call: {json.dumps(report['client_cost'])}", flush=True)
    await delete_all(client)
    await client.close()
    return report


def markdown(report: dict) -> str:
    idle, probed = report["no_probes"], report["with_probes"]
    lines = [
        f"# Prober load: {report['pods']} pods, exec readiness + httpGet liveness every 10 s",
        "",
        f"Agent CPU over {report['window_seconds']:.0f} s: {probed['cpu_percent_of_core']} % of one core with probes, "
        f"{idle['cpu_percent_of_core']} % without (goal: under 5 %). Max RSS {probed['max_rss_mib']} MiB. "
        f"Kernel time (syscalls, TCP handshakes charged to the agent): {probed['kernel_cpu_seconds']} s of "
        f"{probed['cpu_seconds']} s with probes, {idle['kernel_cpu_seconds']} s of {idle['cpu_seconds']} s without.",
        "",
        "| handler | probes in window | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for handler, row in report["probe_latency"].items():
        lines.append(f"| {handler} | {row['probes']} | {row['p50_ms']} | {row['p99_ms']} |")
    floor = report["http_floor_ms"]
    lines += [
        "",
        f"Raw GET floor from the bench process: p50 {floor['p50']} ms, p99 {floor['p99']} ms (goal for httpGet p99: under 50 ms).",
        "",
    ]
    lines += ["CPU per call of the handlers alone, one at a time in the bench process:", ""]
    lines += [
        f"- {h}: {c['cpu_ms_per_call']} ms CPU, {c['wall_ms_per_call']} ms wall"
        for h, c in report["client_cost"].items()
    ]
    return "\n".join(lines)


def svg_plot(report: dict) -> str:
    """Probe latency per handler beside the raw GET floor."""
    bars = []
    for handler, row in report["probe_latency"].items():
        bars += [(f"{handler} probe p50", row["p50_ms"]), (f"{handler} probe p99", row["p99_ms"])]
    floor = report["http_floor_ms"]
    bars += [("raw GET floor p50", floor["p50"]), ("raw GET floor p99", floor["p99"])]
    # A window without a probe of some handler has no quantile (nan): show it as 0, labelled.
    bars = [(label if v == v else f"{label} (none)", v if v == v else 0.0) for label, v in bars]
    return bar_svg(f"probe latency, {report['pods']} pods", bars, "ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None, help="each measuring window")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = SMOKE if args.smoke else Size()
    if args.pods is not None:
        size = replace(size, pods=args.pods)
    if args.seconds is not None:
        size = replace(size, seconds=args.seconds)
    report = run_on_stack(lambda stack: bench(stack, size), tag="p")
    text = markdown(report)
    write_report(out, "probes-load", report, text, svg_plot(report))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
