"""The API server's CPU per write on the two paths a 1 000-node cluster spends most on (issue 36): Lease
renewals (PUT, every node every 10 s) and pod status patches (strategic merge PATCH of pods/status, as a
kubelet writes its pods' states). Figures are reported, never asserted.

  python bench/apiserver/writepath.py [--baseline DIR] [--leases 1000 --pods 1000 --rate 200 --seconds 20]
  python bench/apiserver/writepath.py --smoke --out DIR     # 10 leases and pods, 1 s windows

Each tree under test runs its own API server on its own etcd (TLS, client certificates, as the density
run's control plane), both up at once: the working tree's code, and with --baseline DIR (a source tree,
e.g. `git archive main | tar -x -C DIR`) that tree's code beside it, through PYTHONPATH. Every server
holds --leases Leases in kube-node-lease (in the kubelet's shape: owner reference to its Node) and
--pods Pods bound to nodes; then, in interleaved windows (tree A, tree B, A, B ... for each operation), an
open-loop load at --rate per second of one operation:

- lease: PUT of a Lease as the kubelet renews it (the object it last got back, renewTime moved);
- status: PATCH pods/<p>/status with a strategic merge patch of the whole status as the simulated kubelet
  sends it (`nodesim.podstatus.running`), the Ready condition flipping every time so each patch changes
  the object (a kubelet only patches on change).

Per operation and tree: the server's CPU per request (from /proc, the figure other load disturbs least)
and p50/p99 latency from the scheduled send time. With --profile, one more window per operation of the
working tree's server under py-spy: the functions its CPU goes to.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.apiserver.run import RawConnection, cpu_seconds, pct, schedule, ssl_context
from bench.pyspy import Sampler
from bench.reporting import bar_svg, run_and_report
from nodesim.nodeobjects import lease_object, micro_now
from nodesim.podstatus import running
from nodesim.stages import PodRecord
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.etcd import Etcd

ROOT = Path(__file__).resolve().parents[2]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
PODS = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"
OPERATIONS = ("lease", "status")

# A request: method, path, body, content type.
Request = tuple[str, str, bytes, str]


@dataclass
class Tree:
    """One code tree under test: its etcd, its server, the objects it holds."""

    name: str
    source: Path
    etcd: Etcd
    server: ApiServer
    leases: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)  # requests sent per operation


def tree_server(root: Path, name: str, source: Path) -> Tree:
    etcd = Etcd(root / name / "etcd")
    server = ApiServer(root / name / "server", etcd=etcd)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    server.daemon.env = env
    server.daemon.cwd = source
    return Tree(name, source, etcd, server)


def pod_body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"pod-{i}", "labels": {"app": "bench"}},
        "spec": {
            "nodeName": f"node-{i % 100}",
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
        },
    }


class Workload(Protocol):
    """What an open-loop window sends: request i, and what to do with its answer."""

    def request(self, i: int) -> Request: ...

    def answered(self, i: int, status: int, body: bytes) -> None: ...


async def open_loop(
    server: ApiServer, count: int, rate: float, connections: int, load: Workload
) -> dict[str, Any]:
    """`count` requests of `load` at `rate` per second over `connections` keep-alive connections; the
    server's CPU over the window. Latency counts from the scheduled send time, so client-side queueing
    is charged, not hidden."""
    conns = [
        await RawConnection.open("127.0.0.1", server.port, ssl_context(server)) for _ in range(connections)
    ]
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    latencies: list[float] = []

    async def worker(conn: RawConnection) -> None:
        while (item := await queue.get()) is not None:
            i, scheduled = item
            method, path, body, content_type = load.request(i)
            status, answer = await conn.request(method, path, body, content_type)
            latencies.append(time.perf_counter() - scheduled)
            load.answered(i, status, answer)

    pid = server.pid or 0
    cpu0 = cpu_seconds(pid)
    workers = [asyncio.create_task(worker(c)) for c in conns]
    start = time.perf_counter()
    await schedule(queue, count, rate, workers)
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(pid) - cpu0
    for conn in conns:
        conn.close()
    return {"requests": count, "elapsed_s": elapsed, "cpu_s": cpu, "latencies": latencies}


class Creates:
    """POSTs of `bodies` to `path`; the created objects in order (a failure raises at the end)."""

    def __init__(self, path: str, bodies: list[dict[str, Any]]) -> None:
        self.path, self.bodies = path, bodies
        self.made: list[Any] = [None] * len(bodies)

    def request(self, i: int) -> Request:
        return "POST", self.path, json.dumps(self.bodies[i]).encode(), "application/json"

    def answered(self, i: int, status: int, body: bytes) -> None:
        self.made[i] = json.loads(body) if status == 201 else f"{status}: {body[:300]!r}"

    def created(self) -> list[dict[str, Any]]:
        failed = [m for m in self.made if not isinstance(m, dict)]
        if failed:
            raise RuntimeError(f"create under {self.path} failed: {failed[0]}")
        return self.made


class Writes:
    """The writes of one operation against one tree, each object taken in turn; a 200's body becomes
    the object's newest copy (its resourceVersion, managedFields), as a kubelet keeps what it got back."""

    def __init__(self, tree: Tree, operation: str) -> None:
        self.tree = tree
        self.operation = operation
        self.objects = tree.leases if operation == "lease" else tree.pods
        self.offset = tree.sent.get(operation, 0)  # each window goes on where the last one stopped
        self.errors = 0

    def _at(self, i: int) -> tuple[int, int]:
        """The object request i writes, and how many times that object was written before."""
        return divmod(self.offset + i, len(self.objects))[::-1]

    def request(self, i: int) -> Request:
        index, before = self._at(i)
        obj = self.objects[index]
        name = obj["metadata"]["name"]
        if self.operation == "lease":
            body = dict(obj)
            body["spec"] = {**obj["spec"], "renewTime": micro_now()}
            return "PUT", f"{LEASES}/{name}", json.dumps(body).encode(), "application/json"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = PodRecord(node=obj["spec"]["nodeName"], seen_at=0.0)
        record.ip = f"10.244.{index // 250}.{index % 250 + 2}"
        record.start_stamp = stamp
        status = running(obj, record, "10.0.0.1", stamp)
        if before % 2:
            for condition in status["conditions"]:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition.update(status="False", reason="ContainersNotReady")
        patch = {"metadata": {"uid": obj["metadata"]["uid"]}, "status": status}
        return "PATCH", f"{PODS}/{name}/status", json.dumps(patch).encode(), STRATEGIC

    def answered(self, i: int, status: int, body: bytes) -> None:
        if status == 200:
            self.objects[self._at(i)[0]] = json.loads(body)
        else:
            self.errors += 1

    def done(self, window: dict[str, Any]) -> dict[str, Any]:
        self.tree.sent[self.operation] = self.offset + window["requests"]
        window["errors"] = self.errors
        return window


async def fill(tree: Tree, leases: int, pods: int, connections: int) -> None:
    """The objects every window writes: Leases in the kubelet's shape and Pods bound to nodes."""
    lease_bodies = [lease_object(f"node-{i}", f"00000000-0000-0000-0000-{i:012d}", 40) for i in range(leases)]
    for path, bodies in ((LEASES, lease_bodies), (PODS, [pod_body(i) for i in range(pods)])):
        creates = Creates(path, bodies)
        await open_loop(tree.server, len(bodies), 1e9, connections, creates)
        if path == LEASES:
            tree.leases = creates.created()
        else:
            tree.pods = creates.created()


def combine(windows: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for w in windows for x in w["latencies"]]
    requests = sum(w["requests"] for w in windows)
    elapsed = sum(w["elapsed_s"] for w in windows)
    cpu = sum(w["cpu_s"] for w in windows)
    return {
        "requests": requests,
        "achieved_rate": round(requests / elapsed, 1),
        "errors": sum(w["errors"] for w in windows),
        "p50_ms": round(pct(latencies, 50) * 1000, 2),
        "p99_ms": round(pct(latencies, 99) * 1000, 2),
        "server_cpu_ms_per_request": round(cpu / requests * 1000, 4),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    sources = {"this": ROOT}
    if args.baseline:
        sources = {"baseline": Path(args.baseline).resolve(), **sources}
    with tempfile.TemporaryDirectory(prefix="writepath-bench-") as tmp:
        trees = [tree_server(Path(tmp), name, source) for name, source in sources.items()]
        try:
            for tree in trees:
                tree.etcd.start()
                tree.server.start()
            for tree in trees:
                await fill(tree, args.leases, args.pods, args.connections)
            count = max(int(args.rate * args.seconds / args.rounds), 1)
            windows: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for round_ in range(args.rounds + 1):  # round 0 warms up (connections, caches): not counted
                for operation in OPERATIONS:
                    for tree in trees if round_ % 2 else reversed(trees):
                        load = Writes(tree, operation)
                        window = load.done(
                            await open_loop(tree.server, count, args.rate, args.connections, load)
                        )
                        if round_:
                            windows.setdefault((tree.name, operation), []).append(window)
            profiles: dict[str, Any] = {}
            if args.profile:
                tree = trees[-1]
                for operation in OPERATIONS:
                    raw = Path(args.profile_dir or tmp) / f"{operation}.raw"
                    sampler = Sampler(tree.server.pid or 0, raw, rate=200)
                    load = Writes(tree, operation)
                    load.done(await open_loop(tree.server, count, args.rate, args.connections, load))
                    profiles[operation] = sampler.stop(top=args.profile_top)
            results = {
                op: {tree.name: combine(windows[(tree.name, op)]) for tree in trees} for op in OPERATIONS
            }
            return {
                "trees": {name: str(source) for name, source in sources.items()},
                "leases": args.leases,
                "pods": args.pods,
                "rate": args.rate,
                "rounds": args.rounds,
                "connections": args.connections,
                "results": results,
                "load_average_1m": os.getloadavg()[0],
                "profile": profiles,
            }
        finally:
            for tree in trees:
                tree.server.stop()
                tree.etcd.stop()


def markdown(report: dict[str, Any]) -> str:
    names = list(report["trees"])
    lines = [
        "# API server CPU per write: Lease renewals and pod status patches, on etcd",
        "",
        f"{report['leases']} Leases, {report['pods']} Pods; {report['rate']:g} requests/s of each operation in "
        f"{report['rounds']} interleaved windows per tree, {report['connections']} connections. "
        f"Load average {report['load_average_1m']:.1f}. Trees: "
        + ", ".join(f"{n} = {p}" for n, p in report["trees"].items()),
        "",
        "| operation | tree | achieved/s | p50 ms | p99 ms | errors | server CPU ms/request | against first |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for op in OPERATIONS:
        first = report["results"][op][names[0]]["server_cpu_ms_per_request"]
        for name in names:
            r = report["results"][op][name]
            ratio = r["server_cpu_ms_per_request"] / first if first else float("nan")
            lines.append(
                f"| {op} | {name} | {r['achieved_rate']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors']} "
                f"| {r['server_cpu_ms_per_request']} | {ratio:.2f}x |"
            )
    for op, profile in (report.get("profile") or {}).items():
        lines += ["", f"py-spy, {op} ({profile['samples']} samples): self % / inclusive %", ""]
        lines += [f"- self {pct_:5.1f}  {name}" for name, pct_ in profile["self_pct"]]
        lines += [f"- incl {pct_:5.1f}  {name}" for name, pct_ in profile["inclusive_pct"]]
    return "\n".join(lines)


def svg_plot(report: dict[str, Any]) -> str:
    bars = [
        (f"{op} {name}", report["results"][op][name]["server_cpu_ms_per_request"])
        for op in OPERATIONS
        for name in report["trees"]
    ]
    return bar_svg("API server CPU per write", bars, "ms")


SMOKE = {"leases": 10, "pods": 10, "rate": 20.0, "seconds": 1.0, "rounds": 1, "connections": 2}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", default="", help="a source tree to compare with (its own server and etcd)"
    )
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200, help="requests/s of the operation in a window")
    parser.add_argument("--seconds", type=float, default=20, help="per operation and tree, over the rounds")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--profile", action="store_true", help="one more window per operation under py-spy")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-dir", default="", help="keep py-spy's raw stacks here (<operation>.raw)")
    run_and_report(parser, "apiserver-writepath", main, markdown, svg_plot, SMOKE)
