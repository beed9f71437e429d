"""Cluster DNS with every question new: 10 000 Services, each name asked once, against a dnspython server
as the floor, same client, same run (issue 36).

latency.py keeps its definition (200 names cycled, so after the first round `pykubelet dns` answers
from its memo of replies, against a server that sends one canned reply). This benchmark asks what the
issue asked: --services Services, each question a name not asked before in the run, so no reply memo
can serve it. The floor is a UDP server written with dnspython (message parse, a dict lookup of the
same names, reply built and serialized per query): what answering a real question costs in a
well-kept Python DNS library, without a zone or a watch behind it. One client process drives both
with the same loop: paced (query i sent at i / rate) over the first half of the names, then
closed-loop with a window of outstanding queries over the second half. --rounds rounds over disjoint
slices of the names, each slice asked of the floor and then of ours (no server hears a name twice);
each row carries the load average when it started. Writes dns-distinct.{json,md,svg} (default bench/results/).

    python3 bench/dns/distinct.py [--services 10000] [--rate 1000] [--rounds 2] [--out DIR]
    python3 bench/dns/distinct.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.dns.latency import NAMESPACE, wait_udp
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import free_port
from pykubelet.rig.stack import dns_argv

DNS_USER = "system:serviceaccount:kube-system:coredns"
DNS_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system")
NAME = "svc-{}." + NAMESPACE + ".svc.cluster.local"

FLOOR = """
import asyncio, sys
import dns.message, dns.name, dns.rcode, dns.rdataclass, dns.rdatatype, dns.rrset
count, pattern = int(sys.argv[2]), sys.argv[3]
zone = {dns.name.from_text(pattern.format(i)): f"10.96.{i // 250}.{i % 250 + 1}" for i in range(count)}
class Proto(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport
    def datagram_received(self, data, addr):
        query = dns.message.from_wire(data)
        reply = dns.message.make_response(query)
        question = query.question[0]
        address = zone.get(question.name)
        if address is None:
            reply.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.A:
            reply.answer.append(dns.rrset.from_text(question.name, 30, dns.rdataclass.IN, dns.rdatatype.A, address))
        self.transport.sendto(reply.to_wire(), addr)
async def main():
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(Proto, local_addr=("127.0.0.1", int(sys.argv[1])))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

CLIENT = """
import asyncio, json, sys, time
from dnslib import DNSRecord
port, rate, window, first, count, pattern = (
    int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
half = count // 2
def packet(n, qid):
    out = bytearray(DNSRecord.question(pattern.format(first + n)).pack())
    out[0:2] = qid.to_bytes(2, "big")
    return bytes(out)
paced_packets = [packet(n, n % 65536) for n in range(half)]
loop_packets = [packet(half + n, n % 65536) for n in range(count - half)]

class Client(asyncio.DatagramProtocol):
    def __init__(self):
        self.sent, self.latencies, self.answered, self.waiter = {}, [], 0, None
    def datagram_received(self, data, addr):
        qid = int.from_bytes(data[0:2], "big")
        t = self.sent.pop(qid, None)
        if t is not None:
            self.latencies.append(time.perf_counter() - t)
            self.answered += 1
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(None)

async def main():
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    start = time.perf_counter()
    for i, pkt in enumerate(paced_packets):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        proto.sent[i % 65536] = time.perf_counter()
        transport.sendto(pkt)
    await asyncio.sleep(1.0)
    paced = sorted(proto.latencies)
    lost = len(paced_packets) - len(paced)
    proto.sent.clear(); proto.latencies = []; proto.answered = 0
    i, start = 0, time.perf_counter()
    while i < len(loop_packets) or proto.sent:
        while len(proto.sent) < window and i < len(loop_packets):
            proto.sent[i % 65536] = time.perf_counter()
            transport.sendto(loop_packets[i])
            i += 1
        proto.waiter = loop.create_future()
        try:
            await asyncio.wait_for(proto.waiter, 1.0)
        except asyncio.TimeoutError:
            proto.sent.clear()
    qps = proto.answered / (time.perf_counter() - start)
    transport.close()
    q = lambda p: paced[min(len(paced) - 1, int(p * len(paced)))] if paced else float("nan")
    print(json.dumps({"p50": q(0.5), "p99": q(0.99), "lost": lost, "sent": len(paced_packets), "max_qps": qps}))

asyncio.run(main())
"""


async def create_services(server: ApiServer, count: int) -> None:
    """latency.py's Services, 10 times as many: fewer at once and a longer wait per request, so that a
    loaded machine slows the setup down instead of failing it (a retried create that had landed is a 409)."""
    kube = KubeClient(load_kubeconfig(server.kubeconfig), qps=0, request_timeout=120.0)
    try:
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        gate = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            body = {"metadata": {"name": f"svc-{i}"}, "spec": {"ports": [{"name": "http", "port": 80}]}}
            async with gate:
                try:
                    await kube.create(f"/api/v1/namespaces/{NAMESPACE}/services", body)
                except ApiError as err:
                    if not err.conflict:
                        raise

        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await kube.close()


def drive(port: int, rate: float, window: int, first: int, count: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(rate), str(window), str(first), str(count), NAME],
        capture_output=True,
        text=True,
        check=True,
        timeout=count / rate * 3 + 120,
    )
    return json.loads(out.stdout)


def measure(services: int, rate: float, rounds: int, window: int) -> list[dict]:
    """Per round and server: the figures of one client run over its own slice of the names."""
    # names per client run; both servers are asked the same slice, and no server hears a name twice (the
    # last name is the readiness probe's)
    per_run = (services - 1) // rounds
    with tempfile.TemporaryDirectory(prefix="bench-dns-") as tmp, ApiServer(Path(tmp) / "api") as api:
        asyncio.run(create_services(api, services))
        kubeconfig = api.client_kubeconfig(DNS_USER, DNS_GROUPS, Path(tmp) / "dns.kubeconfig")
        dns_port, floor_port = free_port(), free_port()
        ours = subprocess.Popen(
            [*dns_argv(kubeconfig, "127.0.0.1", dns_port, (free_port(), free_port(), free_port()))]
            + ["--resolv-conf", "/dev/null"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        floor = subprocess.Popen(
            [sys.executable, "-c", FLOOR, str(floor_port), str(services), NAME],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert floor.stdout is not None and floor.stdout.readline().strip() == "ready"
            # readiness probes ask the last name of each server's zone; no run asks it again
            wait_udp(dns_port, NAME.format(services - 1), timeout=120)
            wait_udp(floor_port, NAME.format(services - 1))
            rows = []
            for r in range(rounds):
                for label, port in (("floor", floor_port), ("dns", dns_port)):
                    load = os.getloadavg()[0]
                    got = drive(port, rate, window, r * per_run, per_run)
                    rows.append({"round": r + 1, "server": label, "loadavg_1m": load, **got})
        finally:
            for proc in (ours, floor):
                proc.terminate()
                proc.wait(10)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=1000.0, help="paced queries per second")
    parser.add_argument("--rounds", type=int, default=2, help="floor/ours alternations, disjoint names")
    parser.add_argument("--window", type=int, default=32, help="outstanding queries in the closed loop")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.services, args.rate, args.rounds = 40, 200.0, 1
    rows = measure(args.services, args.rate, args.rounds, args.window)
    summary = {}
    for label in ("floor", "dns"):
        mine = [r for r in rows if r["server"] == label]
        summary[f"{label}_p50_ms"] = round(statistics.median(r["p50"] for r in mine) * 1e3, 4)
        summary[f"{label}_p99_ms"] = round(statistics.median(r["p99"] for r in mine) * 1e3, 4)
        summary[f"{label}_max_qps"] = round(statistics.median(r["max_qps"] for r in mine), 0)
        summary[f"{label}_lost"] = sum(r["lost"] for r in mine)
    summary["p99_ratio"] = round(summary["dns_p99_ms"] / summary["floor_p99_ms"], 3)
    summary["max_qps_ratio"] = round(summary["dns_max_qps"] / summary["floor_max_qps"], 3)
    data = {"services": args.services, "rate": args.rate, "window": args.window, "runs": rows, **summary}
    table = "\n".join(
        f"| {r['round']} | {r['server']} | {r['loadavg_1m']:.2f} | {r['p50'] * 1e3:.3f} | {r['p99'] * 1e3:.3f} "
        f"| {r['lost']} of {r['sent']} | {r['max_qps']:.0f} |"
        for r in rows
    )
    markdown = (
        f"# Cluster DNS, every name new: {args.services} Services, A queries at {args.rate:g}/s and at most\n\n"
        "| round | server | load 1m | p50 ms | p99 ms | lost (paced) | answers/s (closed loop) |\n"
        "| --- | --- | --- | --- | --- | --- | --- |\n"
        f"{table}\n\n"
        + "\n".join(f"- {k}: {v}" for k, v in summary.items())
        + "\n\n`floor` is a dnspython UDP server (parse, dict lookup, reply built per query) holding the same "
        "names; `dns` is `pykubelet dns` answering from its watched zone. Every query asks a name no earlier "
        f"query of the run asked (no reply memo can answer it). Paced: query i at i / rate; closed loop: "
        f"{args.window} outstanding. Loopback, 2 cores shared by server, client and the rest of the machine.\n"
    )
    svg = bar_svg(
        f"A-query p99, distinct names, {args.rate:g} q/s",
        [("dnspython server (floor)", summary["floor_p99_ms"]), ("pykubelet dns", summary["dns_p99_ms"])],
        "ms",
    )
    write_report(out, "dns-distinct", data, markdown, svg)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
