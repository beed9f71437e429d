"""New TCP connections per second between two pods with 500 NetworkPolicies over 100 pods in force,
against none, in the same run (issue 34's goal: >= 0.9x).

The cluster of sync.py (the real API server, 500 policies, 100 pods in 10 namespaces): the agent (in
this process) builds and writes its table, into a network namespace of the run's own standing for the
host. Two of the pods are real network namespaces on a bridge of that host (bridged traffic, which
br_netfilter hands to the table's forward hook): the server p0, isolated for ingress by the policies
selecting it (its chain admits the client by its tier on the named port `http`), and the client p10,
isolated for egress (its chain admits 10.0.0.0/8 but holes). Each new connection's first packet goes
through both verdict maps and both pods' chains; the replies through the established/related accept.

Rounds alternate three tables written by `nft -f` into the host namespace: the agent's table with the
500 policies (`policies_`), the agent's table with no policy (`none_`, the same-run baseline: what every
node carries before anyone writes a policy), and no table at all (`no_table_`). A client process in the
client pod opens a connection, sends a line, reads the answer and closes, as fast as it can for a while.
Writes netpolicy-connections.{json,md,svg} (default bench/results/).

    sudo python3 bench/netpolicy/connections.py [--policies 500] [--pods 100] [--seconds 1] [--rounds 15]
    sudo python3 bench/netpolicy/connections.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.netpolicy.sync import NAMESPACES, in_lab, populate
from bench.proxy.connections import CLIENT, SERVER
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from netpolicy.agent import AgentConfig, PolicyAgent
from netpolicy.nft import NftTable
from netpolicy.rules import Ruleset
from pykubelet.rig.apiserver import ApiServer

SERVER_POD, CLIENT_POD, PORT = 0, NAMESPACES, 8080  # p0 and p10: namespace ns0, node n1, tier t0


def pod_ip(i: int) -> str:
    """The address sync.py's populate reports for pod p<i>."""
    return f"10.200.{i // 250}.{i % 250 + 1}"


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=30)


def wire_pod(host: str, ns: str, ip: str) -> None:
    """A pod namespace on the host namespace's bridge br0 (10.200.0.0/16), as the CNI plugin wires one."""
    sh("ip", "netns", "add", ns)
    outer = f"v{ns[-8:]}"
    sh("ip", "-n", host, "link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
    sh("ip", "-n", host, "link", "set", outer, "master", "br0", "up")
    sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "-n", ns, "addr", "add", f"{ip}/16", "dev", "eth0")
    sh("ip", "-n", ns, "link", "set", "eth0", "up")


def cpu_seconds(pid: int) -> float:
    """User and system time of a running process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_client(ns: str, seconds: float, server_pid: int) -> tuple[float, float]:
    """The service proxy bench's client (connect, a line each way, close, for `seconds`) in pod `ns`:
    connections per second, and the CPU seconds client and server spent per connection (the kernel's
    work for a packet, the rules' walk included, is done on the sending process's time)."""
    argv = [sys.executable, "-c", CLIENT, pod_ip(SERVER_POD), str(PORT), str(seconds), "1"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = cpu_seconds(server_pid)
    out = subprocess.run(
        ["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True, timeout=seconds + 60
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    used += cpu_seconds(server_pid) - served
    rate = float(json.loads(out.stdout)["conn_per_s"])
    return rate, used / max(rate * seconds, 1.0)


async def agent_table(server: ApiServer, nft: NftTable, pods: int, policies: int) -> Ruleset:
    """The agent's ruleset for the cluster, once it has written it."""
    admin = KubeClient(load_kubeconfig(server.kubeconfig), qps=1000, burst=1000)
    try:
        await populate(admin, pods, policies)
        agent = PolicyAgent(admin, AgentConfig(frozenset({"n1"}), nft=nft))
        stop = asyncio.Event()
        runner = asyncio.create_task(agent.run(stop))
        while agent.syncs == 0:
            await asyncio.sleep(0.05)
        stop.set()
        await runner
        assert agent.applied is not None
        return agent.applied
    finally:
        await admin.close()


async def measure(
    server: ApiServer, host: str, pods: int, policies: int, seconds: float, rounds: int
) -> dict:
    tag = uuid.uuid4().hex[:6]
    nft = NftTable(f"npconn-{tag}", netns=host)
    sh("ip", "-n", host, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", host, "addr", "add", "10.200.255.254/16", "dev", "br0")
    sh("ip", "-n", host, "link", "set", "br0", "up")
    names = {i: f"npconn-{tag}-p{i}" for i in (SERVER_POD, CLIENT_POD)}
    made: list[str] = []
    echo: subprocess.Popen[str] | None = None
    try:
        for i, ns in names.items():
            made.append(ns)
            wire_pod(host, ns, pod_ip(i))
        ruleset = await agent_table(server, nft, pods, policies)
        # both ends under policy: the server's ingress chain and the client's egress chain are walked
        ingress_chain = ruleset.ingress[pod_ip(SERVER_POD)]
        egress_chain = ruleset.egress[pod_ip(CLIENT_POD)]
        tables = {
            "policies": ruleset.script(nft.table),
            "none": Ruleset().script(nft.table),
            "no_table": f"add table inet {nft.table}\ndelete table inet {nft.table}\n",
        }
        echo = subprocess.Popen(
            ["ip", "netns", "exec", names[SERVER_POD], sys.executable, "-c", SERVER, f"0.0.0.0:{PORT}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        rates: dict[str, list[float]] = {name: [] for name in tables}
        costs: dict[str, list[float]] = {name: [] for name in tables}
        for script in tables.values():  # warm up each
            await nft.write(script)
            run_client(names[CLIENT_POD], min(seconds, 0.3), echo.pid)
        order = list(tables)
        for _ in range(rounds):
            for name in order:
                await nft.write(tables[name])
                rate, cost = run_client(names[CLIENT_POD], seconds, echo.pid)
                rates[name].append(rate)
                costs[name].append(cost)
            order.reverse()  # ABC CBA ...: no table always runs right after another
    finally:
        if echo is not None:
            echo.terminate()
            echo.wait(10)
        await nft.remove()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)
    figures: dict = {
        "policies": policies,
        "pods": pods,
        "chains": len(ruleset.chains),
        "rules": sum(len(rules) for rules in ruleset.chains.values()),
        "server_ingress_chain_rules": len(ruleset.chains[ingress_chain]),
        "client_egress_chain_rules": len(ruleset.chains[egress_chain]),
    }
    for name, values in rates.items():
        figures[f"{name}_conn_per_s"] = round(statistics.median(values), 1)
    for name, values in costs.items():
        figures[f"{name}_cpu_us_per_conn"] = round(statistics.median(values) * 1e6, 1)
    # the ratios of each round's neighbours in time (the load of a shared machine moves between rounds)
    for other in ("none", "no_table"):
        paired = [p / o for p, o in zip(rates["policies"], rates[other], strict=True)]
        figures[f"ratio_policies_to_{other}"] = round(statistics.median(paired), 3)
        spent = figures[f"{other}_cpu_us_per_conn"] / figures["policies_cpu_us_per_conn"]
        figures[f"cpu_ratio_policies_to_{other}"] = round(spent, 3)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", type=int, default=500)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1.0, help="connection loop length per table")
    parser.add_argument("--rounds", type=int, default=15)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.policies, args.pods, args.seconds, args.rounds = 20, 20, 0.3, 1
    started, load_before = time.monotonic(), os.getloadavg()[0]
    figures = in_lab(
        "npn",
        lambda server, host: measure(server, host, args.pods, args.policies, args.seconds, args.rounds),
    )
    load = f"{load_before:.0f} to {os.getloadavg()[0]:.0f}"
    data = {"seconds": args.seconds, "rounds": args.rounds, "load_average": load, **figures}
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    markdown = (
        f"# Network policies and new connections: {args.policies} policies over {args.pods} pods vs none\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Baseline in the same run: `none_` is the agent's table without any policy (the forward chain "
        "and its empty verdict maps), `no_table_` no table at all. `policies_`: the table the agent wrote "
        "for the cluster; the server pod is isolated for ingress and the client pod for egress, so each "
        "new connection's first packet walks both pods' chains (goal: ratio_policies_to_none >= 0.9). "
        "Each ratio is the median over rounds of that round's two rates (neighbours in time). "
        "`cpu_us_per_conn`: the CPU time client and server processes spent per connection (the client's "
        "interpreter start included, the same for every table), a figure the machine's other load "
        "disturbs less than the rate; `cpu_ratio_` is the connections one CPU-second carries with the "
        "policies against without (of the medians; >= 0.9 is the goal's reading in CPU terms). "
        "One client process, sequential connections (connect, one line each way, close) over a bridge "
        f"(br_netfilter). Rounds alternate the three tables; {args.rounds} round(s) of {args.seconds} s "
        f"each, {time.monotonic() - started:.0f} s in all, 2 cores at a load average of {load}.\n"
    )
    svg = bar_svg(
        "new TCP connections per second between two pods",
        [
            (f"{args.policies} policies", figures["policies_conn_per_s"]),
            ("no policy", figures["none_conn_per_s"]),
            ("no table", figures["no_table_conn_per_s"]),
        ],
        "connections/s",
    )
    write_report(out, "netpolicy-connections", data, markdown, svg)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
