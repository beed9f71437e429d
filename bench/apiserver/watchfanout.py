"""Watch fan-out benchmark (issue 36): the API server's CPU per watch event delivered, in the two shapes a
1 000-node cluster has, on etcd. Figures are reported, never asserted.

  python bench/apiserver/watchfanout.py [--nodes 1000 --all-watchers 5 --rate 20 --seconds 20
                                         --broadcasts 10] [--out DIR]
  python bench/apiserver/watchfanout.py --smoke --out DIR    # 20 nodes, a few pods

Per-node watchers, as kubelets hold: each watches every pod with `fieldSelector=spec.nodeName=<its
node>`; beside them a few watchers of every pod (scheduler, controller manager, simulator, the density
bench's). Pods go through a kubelet-free life at a fixed open-loop rate: create (unbound), bind to node
i mod N, a status write (phase Running), delete (grace 0): 4 writes, each an event fed to the cache.
- phase A: the churn with only the all-pod watchers connected (the baseline of the same run);
- phase B: the same churn with the N per-node watchers connected as well. What B costs beyond A is what
  the per-node watchers cost: the events they get (3 per pod) and every event the server has to decide
  they do not get.
- phase C, broadcast: N watchers of one namespace's ConfigMaps (as the density run's Service watchers),
  one ConfigMap written `--broadcasts` times, each write waited for at every watcher.

Reported per phase: server CPU (user+system of its process) per write and per event delivered, the delay
from sending a write to its event at each watcher that gets it (p50/p99), and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import cpu_seconds, pct, ssl_context
from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver.protobuf import codec, wire
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

NS = "fanout"
PODS = f"/api/v1/namespaces/{NS}/pods"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fanout"}},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}},
                }
            ]
        },
    }


def step_of(event: dict[str, Any]) -> str:
    """Which write of a pod's life an event shows: c(reate), b(ind), s(tatus), d(elete)."""
    if event["type"] == "DELETED":
        return "d"
    obj = event["object"]
    if (obj.get("status") or {}).get("phase") == "Running":
        return "s"
    return "b" if (obj.get("spec") or {}).get("nodeName") else "c"


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[dict[str, Any]]:
    async for line in stream:
        yield json.loads(line)


async def _frames(stream: aiohttp.StreamReader) -> AsyncIterator[dict[str, Any]]:
    """A protobuf watch's events: each a length and a WatchEvent{type, RawExtension{k8s envelope}}."""
    while True:
        (length,) = struct.unpack(">I", await stream.readexactly(4))
        fields = {n: v for n, _, v in wire.fields(await stream.readexactly(length))}
        raw = {n: v for n, _, v in wire.fields(fields[2])}[1]
        yield {"type": fields[1].decode(), "object": codec.decode_envelope(raw)[0]}


class Watchers:
    """Watch streams read by one task each; every event counted, and its delay from the write's send
    time (`sent`, by object name and step) kept per group of watchers."""

    def __init__(self, session: aiohttp.ClientSession, base: str, protobuf: bool = False) -> None:
        self.session = session
        self.base = base
        self.protobuf = protobuf  # watch streams in protobuf (as client-go's kubelets ask), not JSON
        self.sent: dict[tuple[str, str], float] = {}
        self.delays: dict[str, list[float]] = {}
        self.received = 0
        self.ready = 0
        self.tasks: list[asyncio.Task[None]] = []

    def open(self, group: str, path: str, params: dict[str, str], step: Callable[[dict], str]) -> None:
        self.delays.setdefault(group, [])
        self.tasks.append(asyncio.create_task(self._watch(group, path, params, step)))

    async def _watch(
        self, group: str, path: str, params: dict[str, str], step: Callable[[dict], str]
    ) -> None:
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "3600", **params}
        headers = {"Accept": f"{PROTOBUF}, application/json"} if self.protobuf else None
        async with self.session.get(self.base + path, params=query, headers=headers) as resp:
            if resp.status != 200:
                raise RuntimeError(f"watch {path} {params}: {resp.status} {await resp.text()}")
            self.ready += 1
            events = _frames(resp.content) if self.protobuf else _lines(resp.content)
            async for event in events:
                now = time.perf_counter()
                if event["type"] == "BOOKMARK":
                    continue
                self.received += 1
                sent = self.sent.get((event["object"]["metadata"]["name"], step(event)))
                if sent is not None:
                    self.delays[group].append(now - sent)

    async def wait_ready(self, count: int, bound: float = 120.0) -> float:
        started = time.perf_counter()
        while self.ready < count:
            if time.perf_counter() - started > bound:
                raise TimeoutError(f"{self.ready} of {count} watchers connected after {bound:.0f} s")
            for task in self.tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await asyncio.sleep(0.05)
        return time.perf_counter() - started

    async def wait_received(self, count: int, bound: float = 60.0) -> None:
        deadline = time.perf_counter() + bound
        while self.received < count and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
        self.ready = 0


async def call(
    session: aiohttp.ClientSession, method: str, url: str, body: dict, want: int, merge: bool = False
) -> dict[str, Any]:
    headers = {"Content-Type": "application/merge-patch+json"} if merge else None
    async with session.request(method, url, json=body, headers=headers) as resp:
        if resp.status != want:
            raise RuntimeError(f"{method} {url}: {resp.status} {await resp.text()}")
        return await resp.json()


async def life(session: aiohttp.ClientSession, base: str, name: str, node: str, sent: dict) -> None:
    """One pod's four writes, each stamped in `sent` just before it goes."""
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": node}}
    steps = [
        ("c", "POST", PODS, pod(name), 201),
        ("b", "POST", f"{PODS}/{name}/binding", binding, 201),
        ("s", "PATCH", f"{PODS}/{name}/status", {"status": {"phase": "Running"}}, 200),
        ("d", "DELETE", f"{PODS}/{name}", {"gracePeriodSeconds": 0}, 200),
    ]
    for step, method, path, body, want in steps:
        sent[(name, step)] = time.perf_counter()
        await call(session, method, base + path, body, want, merge=method == "PATCH")


async def churn(
    server: ApiServer,
    session: aiohttp.ClientSession,
    watchers: Watchers,
    args: argparse.Namespace,
    phase: str,
) -> dict[str, Any]:
    """`--rate` pod lives a second for `--seconds`, open loop; CPU until every expected event arrived."""
    pid = server.pid or 0
    total = int(args.rate * args.seconds)
    per_pod = 4 * args.all_watchers + (3 if watchers.ready > args.all_watchers else 0)
    expected = watchers.received + total * per_pod
    received0 = watchers.received
    for delays in watchers.delays.values():
        delays.clear()
    cpu0, start = cpu_seconds(pid), time.perf_counter()
    lives = []
    for i in range(total):
        delay = start + i / args.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        name, node = f"{phase}-{i}", f"node-{i % args.nodes}"
        lives.append(asyncio.create_task(life(session, server.url, name, node, watchers.sent)))
    await asyncio.gather(*lives)
    await watchers.wait_received(expected)
    cpu, elapsed = cpu_seconds(pid) - cpu0, time.perf_counter() - start
    delivered = watchers.received - received0
    return {
        "pods": total,
        "writes": 4 * total,
        "events_delivered": delivered,
        "events_expected": expected - received0,
        "server_cpu_s": round(cpu, 2),
        "server_cpu_ms_per_write": round(cpu / (4 * total) * 1000, 3),
        "server_cpu_ms_per_event_delivered": round(cpu / max(delivered, 1) * 1000, 3),
        "server_cpu_percent_of_one_core": round(cpu / elapsed * 100, 1),
        "delay_s": {
            group: {"n": len(d), "p50": round(pct(d, 50), 4), "p99": round(pct(d, 99), 4)}
            for group, d in watchers.delays.items()
            if d
        },
        "load_average_1m": os.getloadavg()[0],
    }


async def broadcast(
    server: ApiServer, session: aiohttp.ClientSession, watchers: Watchers, args: argparse.Namespace
) -> dict[str, Any]:
    """One ConfigMap written `--broadcasts` times to N watchers of the namespace's ConfigMaps."""
    pid = server.pid or 0
    async with session.post(
        server.url + CONFIGMAPS, json={"metadata": {"name": "b"}, "data": {"n": "0"}}
    ) as r:
        rv = (await r.json())["metadata"]["resourceVersion"]
    for _ in range(args.nodes):
        watchers.open("broadcast", CONFIGMAPS, {"resourceVersion": rv}, lambda e: e["object"]["data"]["n"])
    connect = await watchers.wait_ready(args.nodes)
    await asyncio.sleep(1)
    received0 = watchers.received
    cpu0 = cpu_seconds(pid)
    for n in range(1, args.broadcasts + 1):
        watchers.sent[("b", str(n))] = time.perf_counter()
        await call(session, "PATCH", f"{server.url}{CONFIGMAPS}/b", {"data": {"n": str(n)}}, 200, merge=True)
        await watchers.wait_received(received0 + n * args.nodes, bound=30)
    cpu = cpu_seconds(pid) - cpu0
    delivered = watchers.received - received0
    delays = watchers.delays["broadcast"]
    return {
        "watchers": args.nodes,
        "writes": args.broadcasts,
        "connect_all_s": round(connect, 2),
        "events_delivered": delivered,
        "server_cpu_s": round(cpu, 3),
        "server_cpu_ms_per_event_delivered": round(cpu / max(delivered, 1) * 1000, 4),
        "delay_s": {"n": len(delays), "p50": round(pct(delays, 50), 4), "p99": round(pct(delays, 99), 4)},
        "load_average_1m": os.getloadavg()[0],
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="watchfanout-bench-") as tmp:
        root = Path(tmp)
        etcd = Etcd(root / "etcd")
        etcd.start()
        try:
            with ApiServer(root / "data", etcd=etcd) as server:
                return await run_phases(server, args)
        finally:
            etcd.stop()


async def run_phases(server: ApiServer, args: argparse.Namespace) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(ssl=ssl_context(server), limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        async with session.post(f"{server.url}/api/v1/namespaces", json={"metadata": {"name": NS}}) as r:
            await r.read()
        async with session.get(f"{server.url}{PODS}") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        watchers = Watchers(session, server.url, args.protobuf)
        for _ in range(args.all_watchers):
            watchers.open("all-pods", "/api/v1/pods", {"resourceVersion": rv}, step_of)
        await watchers.wait_ready(args.all_watchers)
        report: dict[str, Any] = {
            "nodes": args.nodes,
            "all_watchers": args.all_watchers,
            "rate": args.rate,
            "protobuf": bool(args.protobuf),
        }
        report["a_all_pod_watchers_only"] = await churn(server, session, watchers, args, "a")
        print(json.dumps(report["a_all_pod_watchers_only"]), flush=True)
        async with session.get(f"{server.url}{PODS}") as r:
            rv = (await r.json())["metadata"]["resourceVersion"]
        for i in range(args.nodes):
            params = {"resourceVersion": rv, "fieldSelector": f"spec.nodeName=node-{i}"}
            watchers.open("node", "/api/v1/pods", params, step_of)
        report["node_watchers_connect_s"] = round(
            await watchers.wait_ready(args.all_watchers + args.nodes), 2
        )
        await asyncio.sleep(1)
        report["b_with_node_watchers"] = await churn(server, session, watchers, args, "b")
        print(json.dumps(report["b_with_node_watchers"]), flush=True)
        a, b = report["a_all_pod_watchers_only"], report["b_with_node_watchers"]
        report["node_watchers_cpu_ms_per_pod"] = round(
            (b["server_cpu_s"] - a["server_cpu_s"]) / b["pods"] * 1000, 3
        )
        await watchers.close()
        report["c_broadcast"] = await broadcast(server, session, watchers, args)
        print(json.dumps(report["c_broadcast"]), flush=True)
        await watchers.close()
        return report


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"# Watch fan-out on etcd ({'protobuf' if r.get('protobuf') else 'JSON'}): {r['nodes']} per-node pod watchers, {r['all_watchers']} all-pod watchers, "
        f"{r['rate']:g} pod lives/s",
        "",
        "| phase | writes | events delivered | server CPU ms per write | per event delivered | "
        "delay p50 / p99 s | load avg |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, label in (
        ("a_all_pod_watchers_only", "A: all-pod watchers"),
        ("b_with_node_watchers", "B: + node watchers"),
    ):
        p = r[key]
        delays = "; ".join(f"{g} {d['p50']} / {d['p99']}" for g, d in p["delay_s"].items())
        lines.append(
            f"| {label} | {p['writes']} | {p['events_delivered']} of {p['events_expected']} | "
            f"{p['server_cpu_ms_per_write']} | {p['server_cpu_ms_per_event_delivered']} | {delays} | "
            f"{p['load_average_1m']:.1f} |"
        )
    c = r["c_broadcast"]
    lines.append(
        f"| C: broadcast to {c['watchers']} | {c['writes']} | {c['events_delivered']} | - | "
        f"{c['server_cpu_ms_per_event_delivered']} | {c['delay_s']['p50']} / {c['delay_s']['p99']} | "
        f"{c['load_average_1m']:.1f} |"
    )
    lines += [
        "",
        f"Node watchers' cost beyond phase A: {r['node_watchers_cpu_ms_per_pod']} ms server CPU per pod life.",
    ]
    return "\n".join(lines)


def svg_plot(r: dict[str, Any]) -> str:
    bars = [
        ("A: CPU ms per write", r["a_all_pod_watchers_only"]["server_cpu_ms_per_write"]),
        ("B: CPU ms per write", r["b_with_node_watchers"]["server_cpu_ms_per_write"]),
        ("node watchers: CPU ms per pod", r["node_watchers_cpu_ms_per_pod"]),
        ("C: CPU ms per 100 events", r["c_broadcast"]["server_cpu_ms_per_event_delivered"] * 100),
    ]
    return bar_svg("Watch fan-out, API server CPU", bars, "ms")


SMOKE = {"nodes": 20, "all_watchers": 2, "rate": 5.0, "seconds": 1.0, "broadcasts": 2}


OPTIONS: dict[str, tuple[type, Any, str]] = {
    "--nodes": (int, 1000, "per-node pod watchers (and broadcast watchers)"),
    "--all-watchers": (int, 5, "watchers of every pod"),
    "--rate": (float, 20.0, "pod lives started per second"),
    "--seconds": (float, 20.0, "of pod lives started, per phase"),
    "--broadcasts": (int, 10, "ConfigMap writes in phase C"),
    "--protobuf": (int, 0, "1: every watch in protobuf (as client-go's components ask) instead of JSON"),
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for flag, (kind, default, text) in OPTIONS.items():
        parser.add_argument(flag, type=kind, default=default, help=text)
    run_and_report(parser, "apiserver-watchfanout", main, markdown, svg_plot, SMOKE)
