"""The network-policy agent under pod churn, beside sync.py (same cluster: 500 NetworkPolicies over 100
pods): a pod relabelled through the API so that it leaves a peer selection and comes back, until the
agent's transaction for it has been applied (`nft -f` returned), p50/p99, and the size of that
transaction. Same-run baseline: the same relabelling with the agent made to write the whole table each
time (what every sync did before delta.py), so the figures compare the two ways on one machine at one
load.

The real API server (rig), the real agent in this process (100 ms min-sync-period), real `nft` in a
network namespace of the run's own. Writes netpolicy-churn.{json,md,svg} (default bench/results/).

    sudo python3 bench/netpolicy/churn.py [--policies 500] [--pods 100] [--changes 30] [--out DIR]
    sudo python3 bench/netpolicy/churn.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.netpolicy.sync import NAMESPACES, in_lab, pct, populate
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from netpolicy.agent import AgentConfig, PolicyAgent
from netpolicy.nft import NftTable
from pykubelet.rig.apiserver import ApiServer


async def relabel(admin: KubeClient, agent: PolicyAgent, i: int, tier: str, whole: bool) -> tuple[float, int]:
    """Move pod p<i> to `tier`; seconds until the agent's next write returned, and its size in bytes."""
    path = f"/api/v1/namespaces/ns{i % NAMESPACES}/pods/p{i}"
    body = {"metadata": {"labels": {"tier": tier}}}
    if whole:
        agent.last_script = ""  # the next sync replaces the whole table, as every sync did before delta.py
    before = agent.syncs
    began = time.perf_counter()
    await admin.request("PATCH", path, body=body, content_type="application/merge-patch+json")
    while agent.syncs == before:
        if time.perf_counter() - began > 30:
            raise TimeoutError(f"pod p{i}'s relabelling not written after 30 s")
        await asyncio.sleep(0.005)
    return time.perf_counter() - began, len(agent.last_script.encode())


async def measure(server: ApiServer, netns: str, pods: int, policies: int, changes: int) -> dict:
    admin = KubeClient(load_kubeconfig(server.kubeconfig), qps=1000, burst=1000)
    await populate(admin, pods, policies)
    nft = NftTable(f"churn-{uuid.uuid4().hex[:6]}", netns=netns)
    agent = PolicyAgent(admin, AgentConfig(frozenset({"n1"}), nft=nft))
    stop = asyncio.Event()
    runner = asyncio.create_task(agent.run(stop))
    while agent.syncs == 0:
        await asyncio.sleep(0.05)
    figures: dict[str, tuple[list[float], list[int]]] = {"delta": ([], []), "whole": ([], [])}
    for n in range(changes):
        # even pods live on n1, where the policies naming their tier have chains: the relabelling moves
        # the pod out of a peer set and back (its own chain, by its app label, stays as it is)
        i = (2 * n) % pods
        for tier, mode in ((f"t{(i + 1) % 5}", "delta"), (f"t{i % 5}", "whole")):  # there and back
            took, size = await relabel(admin, agent, i, tier, whole=mode == "whole")
            figures[mode][0].append(took)
            figures[mode][1].append(size)
    stop.set()
    await runner
    await agent.cleanup()
    await admin.close()
    data: dict = {"policies": policies, "pods": pods, "changes": changes}
    for mode, (latencies, sizes) in figures.items():
        data[f"{mode}_relabel_to_kernel_p50_s"] = round(pct(latencies, 0.5), 3)
        data[f"{mode}_relabel_to_kernel_p99_s"] = round(pct(latencies, 0.99), 3)
        data[f"{mode}_transaction_bytes_p50"] = int(statistics.median(sizes)) if sizes else 0
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
        args.policies, args.pods, args.changes = 20, 10, 2
    data = in_lab("npc", lambda server, netns: measure(server, netns, args.pods, args.policies, args.changes))
    rows = [(k, v) for k, v in data.items() if k.endswith("_s")]
    markdown = "\n".join(
        [
            f"# Network-policy agent under pod churn: {data['policies']} policies over {data['pods']} pods, "
            f"{data['changes']} relabellings each way",
            "",
            "| figure | value |",
            "| --- | --- |",
            *(f"| {k} | {v} |" for k, v in data.items() if k not in ("policies", "pods", "changes")),
            "",
            "A pod relabelled through the API (out of a peer selection, then back) until "
            "the agent's next transaction has been applied. `delta`: the agent's own way (only the peer "
            "sets' elements change); `whole`: the same run's baseline, the agent made to replace the whole "
            "table, as each sync did before delta.py.",
        ]
    )
    write_report(out, "netpolicy-churn", data, markdown, bar_svg("pod relabelled -> kernel", rows, "s"))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
