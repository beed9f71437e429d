"""The network-policy agent at 500 NetworkPolicies over 100 pods (10 namespaces, half the pods on this
agent's node): a full sync's time, and the latency from a policy change written to the API server to its
rule being in the kernel, p50/p99.

The real API server (rig), the real agent in this process (its informers and sync loop, 100 ms
min-sync-period), real `nft` in a network namespace of the run's own (the host's rules are never
touched). Same-run baseline: `nft -f` of the whole table alone (what the kernel and nft cost, whatever
builds the script). Writes netpolicy-sync.{json,md,svg} (default bench/results/).

    sudo python3 bench/netpolicy/sync.py [--policies 500] [--pods 100] [--changes 30] [--out DIR]
    sudo python3 bench/netpolicy/sync.py --smoke --out DIR
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
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from netpolicy.agent import AgentConfig, PolicyAgent
from netpolicy.nft import NftTable
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.leaks import Scope

NAMESPACES = 10


def pod(i: int) -> dict:
    return {
        "metadata": {"name": f"p{i}", "labels": {"app": f"a{i % 20}", "tier": f"t{i % 5}"}},
        "spec": {
            "nodeName": "n1" if i % 2 == 0 else "n2",
            "containers": [
                {"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": 8080}]}
            ],
        },
    }


def policy(j: int, port: int = 9000) -> dict:
    peers = [
        {"podSelector": {"matchLabels": {"tier": f"t{j % 5}"}}},
        {"namespaceSelector": {"matchLabels": {"team": f"x{j % 3}"}}},
    ]
    return {
        "metadata": {"name": f"np{j}"},
        "spec": {
            "podSelector": {"matchLabels": {"app": f"a{j % 20}"}},
            "ingress": [{"from": peers, "ports": [{"port": "http"}, {"port": port, "endPort": port + 100}]}],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [f"10.{j % 200}.0.0/16"]}}]}],
        },
    }


async def populate(client: KubeClient, pods: int, policies: int) -> None:
    for k in range(NAMESPACES):
        body = {"metadata": {"name": f"ns{k}", "labels": {"team": f"x{k % 3}"}}}
        await client.request("POST", "/api/v1/namespaces", body=body)
        await client.request(
            "POST", f"/api/v1/namespaces/ns{k}/serviceaccounts", body={"metadata": {"name": "default"}}
        )
    for i in range(pods):
        ns = f"ns{i % NAMESPACES}"
        await client.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod(i))
        status = {"status": {"phase": "Running", "podIP": f"10.200.{i // 250}.{i % 250 + 1}"}}
        await client.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/p{i}/status",
            body=status,
            content_type="application/merge-patch+json",
        )
    for j in range(policies):
        await client.request(
            "POST",
            f"/apis/networking.k8s.io/v1/namespaces/ns{j % NAMESPACES}/networkpolicies",
            body=policy(j),
        )


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(server: ApiServer, netns: str, pods: int, policies: int, changes: int) -> dict:
    admin = KubeClient(load_kubeconfig(server.kubeconfig), qps=1000, burst=1000)
    await populate(admin, pods, policies)
    nft = NftTable(f"bench-{uuid.uuid4().hex[:6]}", netns=netns)
    agent = PolicyAgent(admin, AgentConfig(frozenset({"n1"}), nft=nft))
    stop = asyncio.Event()
    runner = asyncio.create_task(agent.run(stop))
    while agent.syncs == 0:
        await asyncio.sleep(0.05)
    # a full sync from the caches, timed by itself, then nft -f of the same script alone (baseline)
    fulls, applies = [], []
    for _ in range(5):
        agent.last_script = ""
        began = time.perf_counter()
        await agent.sync()
        fulls.append(time.perf_counter() - began)
        began = time.perf_counter()
        await nft.write(agent.last_script)
        applies.append(time.perf_counter() - began)
    # a policy change through the API until its rule is in what the agent wrote
    latencies = []
    for n in range(changes):
        j, port = (2 * n) % policies, 20000 + n  # even policies select pods of n1, this agent's node
        path = f"/apis/networking.k8s.io/v1/namespaces/ns{j % NAMESPACES}/networkpolicies/np{j}"
        body = {"spec": {"ingress": policy(j, port)["spec"]["ingress"]}}
        began = time.perf_counter()
        await admin.request("PATCH", path, body=body, content_type="application/merge-patch+json")
        marker = f"th dport {port}-{port + 100} "
        while marker not in agent.last_script:
            if time.perf_counter() - began > 30:
                raise TimeoutError(f"policy np{j}'s change not written after 30 s")
            await asyncio.sleep(0.005)
        latencies.append(time.perf_counter() - began)
    whole = agent.applied.script(nft.table) if agent.applied is not None else ""  # the table, not a delta
    chains = whole.count("add chain ")
    rules = whole.count("add rule ")
    stop.set()
    await runner
    await agent.cleanup()
    await admin.close()
    return {
        "policies": policies,
        "pods": pods,
        "chains": chains,
        "rules": rules,
        "full_sync_p50_s": round(statistics.median(fulls), 3),
        "nft_apply_alone_p50_s": round(statistics.median(applies), 3),
        "change_to_rules_p50_s": round(pct(latencies, 0.5), 3),
        "change_to_rules_p99_s": round(pct(latencies, 0.99), 3),
        "change_to_rules_max_s": round(max(latencies), 3) if latencies else float("nan"),
    }


def in_lab(tag: str, run: Callable[[ApiServer, str], Awaitable[dict]]) -> dict:
    """`run` with the real API server and a network namespace of its own (for nft); nothing left after."""
    netns = f"{tag}-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix=f"{tag}-bench-"))
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        with ApiServer(work / "api") as server:
            data = asyncio.run(run(server, netns))
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    leaked = Scope.of(work, named_netns=[netns]).leaked()
    assert not leaked, f"left {leaked}"
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", type=int, default=500)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--changes", type=int, default=30)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.policies, args.pods, args.changes = 20, 10, 3
    data = in_lab("npb", lambda server, netns: measure(server, netns, args.pods, args.policies, args.changes))
    rows = [(k, v) for k, v in data.items() if k.endswith("_s")]
    markdown = "\n".join(
        [
            f"# Network-policy agent sync: {data['policies']} policies over {data['pods']} pods "
            f"({data['chains']} chains, {data['rules']} rules on this node)",
            "",
            "| figure | seconds |",
            "| --- | --- |",
            *(f"| {k} | {v} |" for k, v in rows),
            "",
            "Baseline in the same run: `nft_apply_alone_p50_s` is `nft -f` of the whole table by itself. "
            "change_to_rules: a policy's ingress ports patched through the API until the script the agent "
            "wrote (after `nft -f` returned) holds the new range (goal: p99 < 1 s).",
        ]
    )
    write_report(out, "netpolicy-sync", data, markdown, bar_svg("network-policy agent sync", rows, "s"))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
