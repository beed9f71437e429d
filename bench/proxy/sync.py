"""The service proxy at 1 000 Services x 10 endpoints: full sync time, and the latency from an
EndpointSlice change (a write to the API server) to its rules being in the kernel, p50/p99.

The real API server (rig), the real proxier in this process (its informers, its sync loop with
kube-proxy's 1 s min-sync-period and burst of 2), real `nft` in a network namespace of the run's own
(the host's rules are never touched). Same-run baselines: `nft -f` of the whole ruleset alone (what
the kernel and nft cost, whatever builds the script) and of one partial script alone. Writes
proxy-sync.{json,md,svg} (default bench/results/).

    sudo python3 bench/proxy/sync.py [--services 1000] [--endpoints 10] [--changes 50] [--out DIR]
    sudo python3 bench/proxy/sync.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.leaks import Scope
from serviceproxy.conntrack import Conntrack
from serviceproxy.nft import Nft
from serviceproxy.proxier import Proxier, ProxyConfig


def address(i: int, e: int, endpoints: int, generation: int) -> str:
    """Endpoint e of Service i; the first one moves to a fresh address with each generation."""
    if e == 0:
        return f"10.{100 + generation % 100}.{i // 250}.{i % 250 + 1}"
    n = i * endpoints + e
    return f"10.1.{n // 250 % 256}.{n % 250 + 1}"


def slice_body(i: int, endpoints: int, generation: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": f"s{i}-x", "labels": {"kubernetes.io/service-name": f"s{i}"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": [address(i, e, endpoints, generation)],
                "conditions": {"ready": True},
                "nodeName": "n1",
            }
            for e in range(endpoints)
        ],
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def measure(
    server: ApiServer, kubeconfig: Path, netns: str, services: int, endpoints: int, changes: int
) -> dict:
    admin = KubeClient(load_kubeconfig(server.kubeconfig), qps=0)
    ns_path = "/api/v1/namespaces/default"
    sem = asyncio.Semaphore(32)

    async def create(path: str, body: dict) -> None:
        async with sem:
            await admin.create(path, body)

    await asyncio.gather(
        *(
            create(
                f"{ns_path}/services",
                {
                    "metadata": {"name": f"s{i}"},
                    "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
                },
            )
            for i in range(services)
        )
    )
    await asyncio.gather(
        *(
            create("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", slice_body(i, endpoints, 0))
            for i in range(services)
        )
    )
    nft = Nft("kube-proxy", netns=netns)
    kube = KubeClient(load_kubeconfig(kubeconfig), component="kube-proxy")
    proxier = Proxier(
        kube, ProxyConfig(node_name="n1", cluster_cidr="10.0.0.0/8", nft=nft, conntrack=Conntrack(netns))
    )
    stop = asyncio.Event()
    started = time.monotonic()
    task = asyncio.create_task(proxier.run(stop))
    while proxier.syncs == 0 or proxier.last is None or len(proxier.last.chains) < services * (endpoints + 1):
        await asyncio.sleep(0.01)
    first_sync_wall = time.monotonic() - started
    full = proxier.metrics.full_sync_duration.collect()[0].samples
    full_seconds = next(s.value for s in full if s.name.endswith("_sum"))
    # Baselines: nft alone for the whole table and for one change.
    script = proxier.writer.full(proxier.last, await nft.existing())
    t = time.monotonic()
    await nft.apply(script)
    nft_full = time.monotonic() - t
    latencies = []
    for n in range(changes):
        i = (n * 37) % services
        body = slice_body(i, endpoints, n + 1)
        new_ip = body["endpoints"][0]["addresses"][0]
        current = await admin.get(f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/s{i}-x")
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        t = time.monotonic()
        await admin.replace(f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/s{i}-x", body)
        while not any(name.endswith(f"__{new_ip}/8080") for name in proxier.last.chains):
            await asyncio.sleep(0.002)
        latencies.append(time.monotonic() - t)
        await asyncio.sleep(0.3)  # changes arrive spread out, not as one batch
    before = proxier.last
    t_build = time.monotonic()
    proxier.wanted()
    build_seconds = time.monotonic() - t_build
    stop.set()
    await task
    partial = proxier.metrics.partial_sync_duration.collect()[0].samples
    p_count = next(s.value for s in partial if s.name.endswith("_count"))
    p_sum = next(s.value for s in partial if s.name.endswith("_sum"))
    await proxier.cleanup()
    await kube.close()
    await admin.close()
    return {
        "services": services,
        "endpoints_per_service": endpoints,
        "changes": changes,
        "chains": len(before.chains),
        "first_full_sync_wall_s": round(first_sync_wall, 3),
        "full_sync_s": round(full_seconds, 3),
        "nft_full_apply_alone_s": round(nft_full, 3),
        "model_build_s": round(build_seconds, 3),
        "partial_sync_mean_s": round(p_sum / p_count, 4) if p_count else float("nan"),
        "change_to_rules_p50_s": round(pct(latencies, 0.5), 3),
        "change_to_rules_p99_s": round(pct(latencies, 0.99), 3),
        "change_to_rules_max_s": round(max(latencies), 3) if latencies else float("nan"),
        "change_to_rules_mean_s": round(statistics.mean(latencies), 3) if latencies else float("nan"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--changes", type=int, default=50)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.services, args.endpoints, args.changes = 20, 3, 5
    netns = f"pkb-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        with ApiServer(work / "api") as server:
            kubeconfig = server.client_kubeconfig("system:kube-proxy", (), work / "proxy.kubeconfig")
            data = asyncio.run(
                measure(server, kubeconfig, netns, args.services, args.endpoints, args.changes)
            )
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    leaked = Scope.of(work, named_netns=[netns]).leaked()
    assert not leaked, f"left {leaked}"
    rows = [(k, v) for k, v in data.items() if k.endswith("_s")]
    markdown = "\n".join(
        [
            f"# Service proxy sync: {data['services']} Services x {data['endpoints_per_service']} endpoints "
            f"({data['chains']} chains)",
            "",
            "| figure | seconds |",
            "| --- | --- |",
            *(f"| {k} | {v} |" for k, v in rows),
            "",
            "Baseline in the same run: `nft_full_apply_alone_s` is `nft -f` of the whole table by itself. "
            "change_to_rules: an EndpointSlice replaced through the API until the proxier's committed ruleset "
            "(after `nft -f` returned) holds the new endpoint's chain; the sync loop runs at most 2 syncs per "
            "1 s min-sync-period, as kube-proxy's.",
        ]
    )
    write_report(out, "proxy-sync", data, markdown, bar_svg("service proxy sync", rows, "s"))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
