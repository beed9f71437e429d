"""Cluster DNS: A-record latency p50/p99 at a fixed 1 000 queries/s and the most queries/s one server
process answers, against a direct-answer baseline measured in the same run.

The real API server (rig) holding `--services` Services, the real `pykubelet dns` process on its own
identity (kube-system/coredns) fed by its watches, on a loopback port. The baseline is a UDP server on
the same event loop machinery that answers every query with a reply built once in advance (its id
patched in): what Python's socket path and the client cost, without any parsing or zone lookup. One
client process drives both with the same schedule: paced (query i sent at i / rate, latency per id) and
then closed-loop with a window of outstanding queries (answers/s). Writes dns-latency.{json,md,svg}
(default bench/results/).

    python3 bench/dns/latency.py [--services 1000] [--rate 1000] [--seconds 5] [--out DIR]
    python3 bench/dns/latency.py --smoke --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import free_port
from pykubelet.rig.stack import dns_argv

DNS_USER = "system:serviceaccount:kube-system:coredns"
DNS_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kube-system")
NAMESPACE = "bench"

BASELINE = """
import asyncio, sys
from dnslib import A, QTYPE, RR, DNSRecord
name = sys.argv[2]
reply = DNSRecord.question(name)
reply.header.qr = 1
reply.add_answer(RR(name, QTYPE.A, rdata=A("10.96.0.10"), ttl=30))
canned = bytearray(reply.pack())
class Proto(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport
    def datagram_received(self, data, addr):
        out = bytearray(canned)
        out[0:2] = data[0:2]
        self.transport.sendto(bytes(out), addr)
async def main():
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(Proto, local_addr=("127.0.0.1", int(sys.argv[1])))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

CLIENT = """
import asyncio, json, random, sys, time
from dnslib import DNSRecord
port, rate, seconds, window = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5].split(",")
packets = [bytearray(DNSRecord.question(n).pack()) for n in names]

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

def packet(i):
    out = bytearray(packets[i % len(packets)])
    out[0:2] = (i % 65536).to_bytes(2, "big")
    return bytes(out)

async def main():
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", port))
    # paced: query i leaves at i / rate
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        proto.sent[i % 65536] = time.perf_counter()
        transport.sendto(packet(i))
    await asyncio.sleep(1.0)
    paced = sorted(proto.latencies)
    lost = total - len(paced)
    # closed loop: `window` queries outstanding
    proto.sent.clear(); proto.latencies = []; proto.answered = 0
    i, start = 0, time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        while len(proto.sent) < window:
            proto.sent[i % 65536] = time.perf_counter()
            transport.sendto(packet(i))
            i += 1
        proto.waiter = loop.create_future()
        try:
            await asyncio.wait_for(proto.waiter, 1.0)
        except asyncio.TimeoutError:
            proto.sent.clear()
    qps = proto.answered / (time.perf_counter() - start)
    transport.close()
    q = lambda p: paced[min(len(paced) - 1, int(p * len(paced)))] if paced else float("nan")
    print(json.dumps({"p50": q(0.5), "p99": q(0.99), "lost": lost, "sent": total, "max_qps": qps}))

asyncio.run(main())
"""


def wait_udp(port: int, name: str, timeout: float = 30.0) -> None:
    from dnslib import DNSRecord

    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.5)
        while time.monotonic() < deadline:
            sock.sendto(DNSRecord.question(name).pack(), ("127.0.0.1", port))
            try:
                reply = DNSRecord.parse(sock.recv(4096))
                if reply.rr:
                    return
            except OSError:
                pass
            time.sleep(0.2)
    raise RuntimeError(f"no answer for {name} on port {port}")


def drive(port: int, rate: float, seconds: float, window: int, names: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(rate), str(seconds), str(window), ",".join(names)],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds * 3 + 60,
    )
    return json.loads(out.stdout)


async def create_services(server: ApiServer, count: int) -> None:
    kube = KubeClient(load_kubeconfig(server.kubeconfig), qps=0)
    try:
        await kube.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        gate = asyncio.Semaphore(16)

        async def one(i: int) -> None:
            async with gate:
                await kube.create(
                    f"/api/v1/namespaces/{NAMESPACE}/services",
                    {"metadata": {"name": f"svc-{i}"}, "spec": {"ports": [{"name": "http", "port": 80}]}},
                )

        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        await kube.close()


def measure(services: int, rate: float, seconds: float, window: int) -> dict:
    names = [f"svc-{i}.{NAMESPACE}.svc.cluster.local" for i in range(0, services, max(1, services // 200))]
    with tempfile.TemporaryDirectory(prefix="bench-dns-") as tmp, ApiServer(Path(tmp) / "api") as api:
        asyncio.run(create_services(api, services))
        kubeconfig = api.client_kubeconfig(DNS_USER, DNS_GROUPS, Path(tmp) / "dns.kubeconfig")
        dns_port, base_port = free_port(), free_port()
        ours = subprocess.Popen(
            [
                *dns_argv(kubeconfig, "127.0.0.1", dns_port, (free_port(), free_port(), free_port())),
                "--resolv-conf",
                "/dev/null",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = subprocess.Popen(
            [sys.executable, "-c", BASELINE, str(base_port), names[0]], stdout=subprocess.PIPE, text=True
        )
        try:
            assert base.stdout is not None and base.stdout.readline().strip() == "ready"
            wait_udp(dns_port, names[-1], timeout=60)
            wait_udp(base_port, names[0])
            baseline = drive(base_port, rate, seconds, window, names)
            cluster = drive(dns_port, rate, seconds, window, names)
        finally:
            for proc in (ours, base):
                proc.terminate()
                proc.wait(10)
    figures = {}
    for label, got in (("baseline", baseline), ("dns", cluster)):
        figures[f"{label}_p50_ms"] = round(got["p50"] * 1e3, 4)
        figures[f"{label}_p99_ms"] = round(got["p99"] * 1e3, 4)
        figures[f"{label}_lost"] = got["lost"]
        figures[f"{label}_max_qps"] = round(got["max_qps"], 0)
    figures["sent_paced"] = cluster["sent"]
    figures["p99_ratio"] = round(figures["dns_p99_ms"] / figures["baseline_p99_ms"], 3)
    figures["max_qps_ratio"] = round(figures["dns_max_qps"] / figures["baseline_max_qps"], 3)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=1000.0, help="paced queries per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--window", type=int, default=32, help="outstanding queries in the closed loop")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke:
        args.services, args.rate, args.seconds = 20, 200.0, 0.5
    figures = measure(args.services, args.rate, args.seconds, args.window)
    data = {
        "services": args.services,
        "rate": args.rate,
        "seconds": args.seconds,
        "window": args.window,
        **figures,
    }
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    markdown = (
        f"# Cluster DNS: A queries at {args.rate:g}/s and at most, {args.services} Services\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Baseline in the same run: `baseline_` is a UDP server answering every query with a reply built in "
        "advance (no parsing, no lookup), driven by the same client with the same schedule; `dns_` is "
        "`pykubelet dns` answering from its watched zone. Paced phase: query i sent at i / rate, latency "
        f"by id, {args.seconds} s; closed loop: {args.window} queries outstanding for {args.seconds} s. "
        "Questions cycle over 200 of the Services' names, so after the first round they are answered from "
        "the resolver's memo of replies for the current zone (cleared on every zone rebuild). "
        "Loopback, 2 cores shared by the server and the client (and whatever else runs).\n"
    )
    svg = bar_svg(
        f"A-query p99 latency at {args.rate:g} q/s",
        [("direct answer (baseline)", figures["baseline_p99_ms"]), ("pykubelet dns", figures["dns_p99_ms"])],
        "ms",
    )
    write_report(out, "dns-latency", data, markdown, svg)
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
