"""What the kubelet API's stats cost with N pods running: /stats/summary (full and only_cpu_and_memory)
and /metrics/resource, against the raw CRI calls they are made of, in the same run (issue 16).

  python bench/agent/stats.py [--pods 110] [--rounds 30] [--out bench/results]
  python bench/agent/stats.py --smoke --out DIR     # 2 pods, 3 rounds: about 20 s

With N one-container pods running through the agent (pre-pulled image), each round measures, one after
the other:
  cri floor:  ListPodSandbox + ListContainers + ListContainerStats at once, straight to containerd
              (what one stats pass asks of CRI);
  cri list container stats: ListContainerStats alone (the floor's largest part);
  cri pod stats: ListPodSandboxStats, containerd's own per-pod figures in one call (not used by the
              agent; for scale);
  summary, summary cpu+mem, metrics/resource: the agent's HTTPS endpoints, as metrics-server calls them
              (client certificate, Webhook authorization answered from the agent's cache after the first).
The first summary (which learns each sandbox's cgroup and PID once) is reported on its own. Figures are
reported, never asserted; the goal is a full summary under 50 ms at 110 pods.
Writes agent-stats.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from bench.agent.startup import ensure_namespace
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-stats"


@dataclass(frozen=True)
class Size:
    pods: int = 110
    rounds: int = 30


SMOKE = Size(pods=2, rounds=3)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(values, 50) * 1e3, 2),
        "p99_ms": round(pct(values, 99) * 1e3, 2),
        "max_ms": round(max(values) * 1e3, 2),
    }


def pod_body(name: str, node: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


async def run_pods(client: KubeClient, n: int, node: str, image: str) -> float:
    """Create n pods at once; seconds until all are Running."""
    t0 = time.monotonic()
    await asyncio.gather(
        *(client.create(f"/api/v1/namespaces/{NS}/pods", pod_body(f"s-{i}", node, image)) for i in range(n))
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        items = (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
        if sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running") == n:
            return time.monotonic() - t0
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{n} pods not Running within 600 s")


async def delete_all(client: KubeClient) -> None:
    pods = (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
    await asyncio.gather(
        *(client.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}") for p in pods)
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if not (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("pods not removed within 300 s")


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    t0 = time.perf_counter()
    await call()
    return time.perf_counter() - t0


def kubelet_tls(stack: Stack) -> ssl.SSLContext:
    """The admin's client certificate (the agent trusts the cluster CA); the serving cert is self-signed."""
    assert stack.apiserver is not None
    pki = stack.apiserver.data_dir / "pki"
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return context


async def bench(stack: Stack, size: Size) -> dict[str, Any]:
    assert stack.images and stack.containerd
    image = stack.images.busybox_pinned
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    cri = await CRIClient.connect(stack.containerd.endpoint)
    await cri.pull_image(image)
    await ensure_namespace(client, NS)
    startup = await run_pods(client, size.pods, stack.node_name, image)
    base = f"https://127.0.0.1:{stack.kubelet_port}"
    tls = kubelet_tls(stack)
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            "cri_floor",
            "cri_list_container_stats",
            "cri_pod_sandbox_stats",
            "summary",
            "summary_cpu_mem",
            "metrics_resource",
        )
    }
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls, limit=1)) as http:

        async def get(path: str) -> bytes:
            async with http.get(base + path) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{path}: {resp.status} {body[:200]!r}")
                return body

        first = await timed(lambda: get("/stats/summary"))
        doc = json.loads(await get("/stats/summary"))
        pods_seen = len([p for p in doc["pods"] if p["podRef"]["namespace"] == NS])

        async def floor() -> None:
            await asyncio.gather(cri.list_pod_sandbox(), cri.list_containers(), cri.list_container_stats())

        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "cri_floor": floor,
            "cri_list_container_stats": cri.list_container_stats,
            "cri_pod_sandbox_stats": cri.list_pod_sandbox_stats,
            "summary": lambda: get("/stats/summary"),
            "summary_cpu_mem": lambda: get("/stats/summary?only_cpu_and_memory=true"),
            "metrics_resource": lambda: get("/metrics/resource"),
        }
        for _ in range(size.rounds):
            for name, call in calls.items():
                samples[name].append(await timed(call))
    floor_p50 = pct(samples["cri_floor"], 50)
    report: dict[str, Any] = {
        "pods": size.pods,
        "pods_in_summary": pods_seen,
        "rounds": size.rounds,
        "pods_running_after_s": round(startup, 1),
        "first_summary_ms": round(first * 1e3, 1),
        "calls": {k: ms(v) for k, v in samples.items()},
        "ratio_p50_to_cri_floor": {k: round(pct(v, 50) / floor_p50, 2) for k, v in samples.items()},
        "summary_per_pod_ms": round(pct(samples["summary"], 50) * 1e3 / max(size.pods, 1), 3),
        "goal_summary_p50_under_ms": 50,
    }
    await delete_all(client)
    await cri.close()
    await client.close()
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Kubelet API stats with {report['pods']} pods",
        "",
        f"{report['pods']} pods running (all {report['pods_in_summary']} in the Summary), {report['rounds']} rounds; "
        f"first summary (learns each sandbox once) {report['first_summary_ms']} ms.",
        "",
        "| call | p50 ms | p99 ms | max ms | p50 / CRI floor |",
        "|---|---|---|---|---|",
    ]
    for name, figures in report["calls"].items():
        ratio = report["ratio_p50_to_cri_floor"][name]
        lines.append(
            f"| {name} | {figures['p50_ms']} | {figures['p99_ms']} | {figures['max_ms']} | {ratio} |"
        )
    lines += [
        "",
        f"Full summary per pod: {report['summary_per_pod_ms']} ms (p50 / pods). Goal: full summary p50 under "
        f"{report['goal_summary_p50_under_ms']} ms at 110 pods.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = SMOKE if args.smoke else Size()
    if args.pods is not None:
        size = Size(args.pods, size.rounds)
    if args.rounds is not None:
        size = Size(size.pods, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, size), tag="s")
    text = markdown(report)
    bars = [(name, figures["p50_ms"]) for name, figures in report["calls"].items()]
    write_report(
        out, "agent-stats", report, text, bar_svg(f"stats calls with {report['pods']} pods, p50", bars, "ms")
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
