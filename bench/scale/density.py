"""Density and load at cluster scale, in the shape of ClusterLoader2's density test, with simulated
nodes (`pykubelet simulate`) against our control plane.

For each N in --nodes: a fresh API server (with its scheduler and controller manager) on the chosen
store, N simulated nodes (pods start at once: image pulls excluded, as the SLO excludes them), then
N x --pods-per-node pods created through Deployments of --pods-per-node replicas at a fixed pod rate,
then the Deployments scaled to 0 and deleted. Measured, against upstream's SLOs:

- API call latency p50/p90/p99 by class, two definitions side by side:
  - client-timed (the first, kept as it was): probe calls the bench makes throughout the run (5 a second
    of each: a single-object GET, a single-object PATCH, a namespaced LIST of pods, a cluster-wide LIST
    of nodes), timed by the bench's client, so they include the network, the client's decoding and the
    bench's own event-loop lag (reported beside them: how late a 100 ms ticker wakes);
    SLO p99 <= 1 s for single-object calls, <= 5 s namespaced lists, <= 30 s cluster lists;
  - upstream's SLI (`api_sli`, `apisli.py`): every call of every client, timed inside the API servers
    (apiserver_request_sli_duration_seconds, scraped from each server's /metrics at the load phase's start,
    every minute, and after the deletes), per (resource, subresource, verb, scope), judged as
    ClusterLoader2's APIResponsivenessPrometheus judges it (its exclusions, 1 s for scope=resource and
    30 s otherwise, p99 over 1-minute windows and over the whole run);
- pod startup latency, from a pod's first appearance on the bench's watch to its Running and Ready on the
  same watch: SLO p99 <= 5 s; and beside it ClusterLoader2's (`pod_startup_cl2`): from the pod's
  creationTimestamp (whole seconds, so up to 1 s early) to the watch first showing it Running;
- scheduling throughput (pods bound per second while the creates run);
- watch fan-out delay to --watchers node watchers (1 000 by default): each holds a watch of every Service,
  as each kubelet does, and while the Deployments are created a Service is written every 2 s (or once
  the last write reached every watcher, 30 s at most); per write, the delay from sending it to its event
  at the first, median and last watcher (the watchers share the bench's process, whose own decoding is
  in the figure);
- CPU seconds and peak RSS of the API server's process tree (scheduler and controller manager
  included), of etcd and of the simulator; each tree also by process (server, scheduler, controller
  manager), and which tree's scheduler and controller manager hold the leader Leases.

With --apiservers K (K > 1, etcd only): K API servers on the one etcd (`ApiServerReplicas`), each with its
own scheduler and controller manager leader-electing, as upstream's HA control plane runs them, and the
load spread as a load balancer in front of them spreads it: the simulator takes every server's
kubeconfig and node i talks to server i mod K (registration, Lease, status, its pods' watch and writes);
watcher i of the fan-out watches through server i mod K; the probe calls go round-robin over the servers
(their figures per class as with one server, and per server); the Deployments are created, and the pods
watched, through the first server. Each server's process tree is reported on its own.

Usage: python bench/scale/density.py [--nodes 100,500,1000] [--pods-per-node 30] [--rate 50]
                                     [--store etcd|sqlite] [--apiservers 1] [--watchers 1000] [--out DIR]
       python bench/scale/density.py --smoke --out DIR     # 5 nodes x 4 pods
Writes scale-density.{json,md,svg} (default bench/results/; scale-density-Kapiservers.* with
--apiservers K > 1) as each N finishes: a run stopped at a larger N keeps the figures of the sizes
before it.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from bench.scale import apisli
from bench.scale.looplag import LoopLag
from bench.scale.scrape import MetricsScrapes
from kubeclient.client import MERGE_PATCH, KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer, ApiServerReplicas
from pykubelet.rig.etcd import Etcd

SLO = {"single": 1.0, "namespaced list": 5.0, "cluster list": 30.0, "pod startup": 5.0}
NAMESPACES = 10
# The components that leader-elect among the API servers' children, and their Leases in kube-system.
LEADER_LEASES = {"scheduler": "kube-scheduler", "controller-manager": "kube-controller-manager"}
# What each latency figure of a run measures (the report's JSON carries this beside them).
DEFINITIONS = {
    "calls": "client-timed: the bench's probe calls (5/s of a node GET, a ConfigMap PATCH, a namespaced "
    "pod LIST, a node LIST), timed by its own client; includes the bench's event-loop lag (bench_loop_lag)",
    "api_sli": "upstream's SLI: apiserver_request_sli_duration_seconds of every call to every API server "
    "(arrival to answer, less admission webhooks and the priority-and-fairness queue), per (resource, "
    "subresource, verb, scope), judged as ClusterLoader2's APIResponsivenessPrometheus (bench/scale/apisli.py)",
    "pod_startup": "first sighting on the bench's pod watch to Running and Ready on the same watch",
    "pod_startup_cl2": "ClusterLoader2's: the pod's creationTimestamp (whole seconds) to the watch first "
    "showing it Running",
}


def git_commit() -> str | None:
    """The commit the bench runs (None outside a git checkout): runs taken one size at a time are joined
    later (`bynodes.py`), and each size's figures must say which code they measured."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def report_name(apiservers: int) -> str:
    """One server keeps the original definition's name; N servers are another definition beside it."""
    return "scale-density" if apiservers == 1 else f"scale-density-{apiservers}apiservers"


def apiservers_problem(apiservers: int, store: str) -> str | None:
    """Why --apiservers cannot run with this store (None: it can)."""
    if apiservers < 1:
        return f"--apiservers must be at least 1, not {apiservers}"
    if apiservers > 1 and store != "etcd":
        return (
            f"--apiservers {apiservers} needs --store etcd: several API servers share one etcd, while a "
            f"SQLite store is one server's own file"
        )
    return None


def server_names(count: int) -> list[str]:
    """The API servers' names in the report: `apiserver` alone, else apiserver-0, apiserver-1, ..."""
    return ["apiserver"] if count == 1 else [f"apiserver-{i}" for i in range(count)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(pct(values, 0.50), 4),
        "p90": round(pct(values, 0.90), 4),
        "p99": round(pct(values, 0.99), 4),
    }


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "c",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}},
                        }
                    ],
                },
            },
        },
    }


class PodWatch:
    """Every pod's first sighting, binding and Running-and-Ready, as a watching client sees them."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.seen: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.cl2: dict[str, float] = {}  # ClusterLoader2's: creationTimestamp to first seen Running
        self.count = 0

    async def run(self) -> None:
        _, rv = await self.client.list("/api/v1/pods")
        while True:
            try:
                async for event in self.client.watch(
                    "/api/v1/pods", {"resourceVersion": rv, "allowWatchBookmarks": "true"}
                ):
                    self._saw(event)
                    rv = event["object"]["metadata"].get("resourceVersion", rv)
            except ApiError as err:
                if err.gone:
                    _, rv = await self.client.list("/api/v1/pods")
                else:
                    await asyncio.sleep(0.5)

    def _saw(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        pod = event["object"]
        if event["type"] not in ("ADDED", "MODIFIED"):
            return
        uid = pod["metadata"]["uid"]
        self.seen.setdefault(uid, now)
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(uid, now)
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and uid not in self.cl2:
            created = pod["metadata"].get("creationTimestamp")
            if created:
                self.cl2[uid] = time.time() - datetime.fromisoformat(created).timestamp()
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if status.get("phase") == "Running" and ready and uid not in self.running:
            self.running[uid] = now
            self.count += 1

    def startup(self) -> list[float]:
        return [self.running[u] - self.seen[u] for u in self.running if u in self.seen]

    def startup_cl2(self) -> list[float]:
        return list(self.cl2.values())


class Prober:
    """Calls of each SLO class at a steady rate during the run, each timed by the caller; each round of
    calls goes to the next of the servers (round-robin), timed per class and per server."""

    def __init__(self, clients: dict[str, KubeClient], node: str) -> None:
        self.clients = clients
        self.node = node
        self.latency: dict[str, list[float]] = {"single": [], "namespaced list": [], "cluster list": []}
        self.by_server: dict[str, dict[str, list[float]]] = {
            name: {kind: [] for kind in self.latency} for name in clients
        }

    async def _timed(self, server: str, kind: str, call: Any) -> None:
        start = time.monotonic()
        try:
            await call
        except ApiError:
            return
        took = time.monotonic() - start
        self.latency[kind].append(took)
        self.by_server[server][kind].append(took)

    async def run(self, rate: float = 5.0) -> None:
        tick = 0
        names = list(self.clients)
        while True:
            tick += 1
            ns = f"density-{tick % NAMESPACES}"
            server = names[tick % len(names)]
            client = self.clients[server]
            await asyncio.gather(
                self._timed(server, "single", client.get(f"/api/v1/nodes/{self.node}")),
                self._timed(
                    server,
                    "single",
                    client.patch(
                        f"/api/v1/namespaces/{ns}/configmaps/probe",
                        {"data": {"tick": str(tick)}},
                        content_type=MERGE_PATCH,
                    ),
                ),
                self._timed(server, "namespaced list", client.get(f"/api/v1/namespaces/{ns}/pods")),
                self._timed(server, "cluster list", client.get("/api/v1/nodes")),
            )
            await asyncio.sleep(1 / rate)

    def result(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The figures per class, and per server and class."""
        calls = {k: figures(v) for k, v in self.latency.items()}
        per_server = {s: {k: figures(v) for k, v in kinds.items()} for s, kinds in self.by_server.items()}
        return calls, per_server


class FanOut:
    """`count` watchers of every Service, as `count` kubelets hold; a Service written every `period` s
    (through the first server), and the delay from each write to its event at each watcher. Watcher i
    watches through server i mod N, as N servers behind a load balancer share the kubelets."""

    def __init__(self, kubeconfigs: dict[str, Path], count: int, namespace: str) -> None:
        per_server = math.ceil(count / len(kubeconfigs))
        self.clients = [
            KubeClient(load_kubeconfig(k), qps=0, max_connections=per_server + 4, component="fanout")
            for k in kubeconfigs.values()
        ]
        self.servers = list(kubeconfigs)
        self.client = self.clients[0]
        self.count = count
        self.path = f"/api/v1/namespaces/{namespace}/services"
        self.arrivals: list[dict[str, float]] = [{} for _ in range(count)]
        self.rounds: list[dict[str, float]] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def _watch(self, i: int, rv: str) -> None:
        client = self.clients[i % len(self.clients)]
        while True:
            try:
                async for event in client.watch(
                    "/api/v1/services", {"resourceVersion": rv, "timeoutSeconds": 3600}
                ):
                    obj = event["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    mark = (obj["metadata"].get("annotations") or {}).get("bench/round")
                    if mark is not None:
                        self.arrivals[i].setdefault(mark, time.monotonic())
            except ApiError:
                await asyncio.sleep(0.5)

    async def _write(self, mark: str) -> float:
        sent = time.monotonic()
        await self.client.patch(
            f"{self.path}/fanout",
            {"metadata": {"annotations": {"bench/round": mark}}},
            content_type=MERGE_PATCH,
        )
        return sent

    async def start(self) -> float:
        """The watchers connected: a first write reached every one. Returns the seconds that took."""
        created = await self.client.create(
            self.path, {"metadata": {"name": "fanout"}, "spec": {"ports": [{"port": 80}]}}
        )
        rv = created["metadata"]["resourceVersion"]
        t0 = time.monotonic()
        self.tasks = [asyncio.create_task(self._watch(i, rv)) for i in range(self.count)]
        for attempt in range(120):
            await self._write(f"warm-{attempt}")
            await asyncio.sleep(0.5)
            if all(f"warm-{attempt}" in a for a in self.arrivals):
                return time.monotonic() - t0
        raise TimeoutError(f"{self.count} Service watchers not all connected after 60 s")

    async def run(self, period: float = 2.0, bound: float = 30.0) -> None:
        """A write every `period` s; each waits for every watcher (at most `bound` s) before the next."""
        n = 0
        while True:
            n += 1
            mark = str(n)
            sent = await self._write(mark)
            while time.monotonic() - sent < bound and not all(mark in a for a in self.arrivals):
                await asyncio.sleep(0.02)
            await asyncio.sleep(max(0.0, sent + period - time.monotonic()))
            got = sorted(a[mark] - sent for a in self.arrivals if mark in a)
            self.rounds.append(
                {
                    "first": got[0] if got else float("nan"),
                    "median": pct(got, 0.5),
                    "last": got[-1] if len(got) == self.count else float("nan"),
                    "missing": self.count - len(got),
                    "last_by_server": self._last_by_server(mark, sent),
                }
            )

    def _last_by_server(self, mark: str, sent: float) -> list[float]:
        """Per server, the delay to the last of its watchers (NaN when one of them missed the write)."""
        n = len(self.clients)
        out = []
        for s in range(n):
            mine = [a.get(mark) for a in self.arrivals[s::n]]
            whole = bool(mine) and None not in mine
            out.append(max(t for t in mine if t is not None) - sent if whole else float("nan"))
        return out

    async def close(self) -> dict[str, Any]:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for client in self.clients:
            await client.close()
        last = [r["last"] for r in self.rounds if not r["missing"]]  # writes every watcher saw
        by_server = {
            name: figures([r["last_by_server"][s] for r in self.rounds if not r["missing"]])
            for s, name in enumerate(self.servers)
        }
        return {
            "watchers": self.count,
            "writes": len(self.rounds),
            "first": figures([r["first"] for r in self.rounds if r["missing"] < self.count]),
            "median_watcher": figures([r["median"] for r in self.rounds if r["missing"] < self.count]),
            "last_watcher": figures(last),
            "last_watcher_by_server": by_server,
            "writes_missing_a_watcher": sum(1 for r in self.rounds if r["missing"]),
        }


def role(proc: psutil.Process) -> str:
    """What a process is: the component of `python -m pykubelet <component>` (server, scheduler,
    controller-manager, simulate), else its executable's name (etcd)."""
    try:
        argv = proc.cmdline()
        if "pykubelet" in argv[:-1]:
            return argv[argv.index("pykubelet") + 1]
        return proc.name()
    except psutil.Error:
        return "gone"


def _cpu(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system


def _cpu_with_reaped(proc: psutil.Process) -> float:
    """`_cpu`, plus that of the process's children that have ended and been waited for (the kernel adds
    them to their parent's), so a component that exited and was started again keeps its first life's."""
    try:
        t = proc.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return t.user + t.system + t.children_user + t.children_system


class ProcessUse:
    """CPU seconds and peak RSS of a process and its children over the run, in all and by role (a
    server's own process, its scheduler, its controller manager). A child that ends during the run (a
    scheduler or controller manager that lost its leader Lease and was started again) keeps its CPU: in
    the tree's total through its parent's reaped-children times, and in its role's by the last reading
    `sample` took of it."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.start = self.cpu_seconds()
        self.base = {p.pid: _cpu(p) for p in self._tree()}
        self.roles: dict[int, str] = {p.pid: role(p) for p in self._tree()}  # every process of it seen
        self.last_cpu: dict[int, float] = dict(self.base)  # each process's CPU at its latest sample
        self.peak_rss = 0
        self.peak_by_role: dict[str, int] = {}

    def _tree(self) -> list[psutil.Process]:
        try:
            return [self.proc, *self.proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_seconds(self) -> float:
        """User and system CPU seconds of the process and its children so far, ended ones included."""
        return sum(_cpu_with_reaped(p) for p in self._tree())

    def sample(self) -> None:
        rss = 0
        by_role: dict[str, int] = {}
        for p in self._tree():
            try:
                used = p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            name = self.roles.setdefault(p.pid, role(p))
            self._saw_cpu(p)
            rss += used
            by_role[name] = by_role.get(name, 0) + used
        self.peak_rss = max(self.peak_rss, rss)
        for name, used in by_role.items():
            self.peak_by_role[name] = max(self.peak_by_role.get(name, 0), used)

    def _saw_cpu(self, proc: psutil.Process) -> None:
        # A process that ended since reads as 0: keep what it had used.
        self.last_cpu[proc.pid] = max(self.last_cpu.get(proc.pid, 0.0), _cpu(proc))

    def pids(self) -> set[int]:
        return {p.pid for p in self._tree()}

    def result(self) -> dict[str, Any]:
        """The tree's CPU seconds and peak RSS, and each role's (a process that ended counts what it
        had used at its last sample)."""
        cpu: dict[str, float] = {}
        for p in self._tree():
            self.roles.setdefault(p.pid, role(p))
            self._saw_cpu(p)
        for pid, used in self.last_cpu.items():
            name = self.roles.get(pid, "gone")
            cpu[name] = cpu.get(name, 0.0) + used - self.base.get(pid, 0.0)
        parts = {
            name: {
                "cpu_s": round(cpu.get(name, 0.0), 1),
                "peak_rss_mib": round(self.peak_by_role.get(name, 0) / 2**20, 1),
            }
            for name in sorted(set(cpu) | set(self.peak_by_role))
        }
        return {
            "cpu_s": round(self.cpu_seconds() - self.start, 1),
            "peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "by_process": parts,
        }


async def leaders(client: KubeClient, uses: dict[str, ProcessUse]) -> dict[str, list[str]]:
    """Per process tree, the components whose leader Lease one of its processes holds. Our components'
    holder identity is `hostname_pid_suffix` (kubeclient.leaderelection): the pid names the process."""
    held: dict[str, list[str]] = {name: [] for name in uses}
    for component, lease in LEADER_LEASES.items():
        try:
            obj = await client.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/{lease}")
        except ApiError:
            continue
        parts = ((obj.get("spec") or {}).get("holderIdentity") or "").rsplit("_", 2)
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        for name, use in uses.items():
            if pid in use.pids():
                held[name].append(component)
    return held


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.5)


def control_plane(root: Path, args: argparse.Namespace, etcd: Etcd | None) -> ApiServer | ApiServerReplicas:
    """One API server (on etcd or SQLite), or --apiservers of them on the one etcd; each with its
    scheduler and controller manager (with several, they leader-elect)."""
    limits = []
    if args.controller_manager_qps is not None:  # upstream's scale tests raise the controller manager's
        limits = ["--controller-manager-kube-api-qps", str(args.controller_manager_qps)]
        limits += ["--controller-manager-kube-api-burst", str(int(args.controller_manager_qps * 1.5))]
    count = args.apiservers
    if count == 1:
        return ApiServer(root / "api", scheduler=True, controllers=True, etcd=etcd, extra_args=limits)
    assert etcd is not None, apiservers_problem(count, args.store)
    return ApiServerReplicas(root / "api", count, etcd, scheduler=True, controllers=True, extra_args=limits)


async def one_size(root: Path, nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    etcd = Etcd(root / "etcd") if args.store == "etcd" else None
    plane = control_plane(root, args, etcd)
    servers = plane.servers if isinstance(plane, ApiServerReplicas) else [plane]
    names = server_names(len(servers))
    kubeconfigs = {name: server.kubeconfig for name, server in zip(names, servers, strict=True)}
    sim: subprocess.Popen[bytes] | None = None
    try:
        if etcd is not None:
            etcd.start()
        plane.start()
        use = {name: ProcessUse(s.pid or 0) for name, s in zip(names, servers, strict=True)}
        if etcd is not None:
            use["etcd"] = ProcessUse(etcd.pid or 0)
        log = (root / "simulate.log").open("w")
        sim = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubelet",
                "simulate",
                *(f"--kubeconfig={k}" for k in kubeconfigs.values()),
                f"--nodes={nodes}",
                "--start-delay=0s",
                "--kube-api-qps=2000",
                "--kube-api-burst=4000",
                "--concurrency=64",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        use["simulator"] = ProcessUse(sim.pid)
        probes = {
            name: KubeClient(load_kubeconfig(k), qps=5000, burst=10000) for name, k in kubeconfigs.items()
        }
        client = probes[names[0]]
        scrapes = MetricsScrapes([load_kubeconfig(k) for k in kubeconfigs.values()])
        lag = LoopLag()
        try:

            async def all_ready() -> bool:
                items, _ = await client.list(
                    "/api/v1/nodes", {"labelSelector": "nodesim.pykubelet.io/simulated=true"}
                )
                ready = [
                    n
                    for n in items
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n["status"].get("conditions", [])
                    )
                    and not any(
                        t.get("key") == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints") or []
                    )
                ]
                return len(ready) == nodes

            started = time.monotonic()
            await wait_until(all_ready, 60 + nodes * 0.2, f"{nodes} simulated nodes Ready")
            registration = time.monotonic() - started
            for i in range(NAMESPACES):
                ns = f"density-{i}"
                await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
                await client.create(f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "probe"}})
            fanout = FanOut(kubeconfigs, args.watchers, "density-0")
            fanout_connect = await fanout.start()
            await scrapes.scrape()  # the load phase starts: the SLI's first edge
            load_start = time.monotonic()
            phases: dict[str, float] = {}  # each phase's end, in seconds from the load phase's start
            watcher = PodWatch(client)
            prober = Prober(probes, f"sim-{0:0{len(str(nodes - 1))}d}")
            tasks = [
                asyncio.create_task(watcher.run()),
                asyncio.create_task(prober.run()),
                asyncio.create_task(scrapes.run()),
                asyncio.create_task(lag.run()),
            ]
            fanout_task = asyncio.create_task(fanout.run())
            total = nodes * args.pods_per_node
            deployments = nodes
            create_latency: list[float] = []
            first = time.monotonic()
            for d in range(deployments):
                due = first + d * args.pods_per_node / args.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                ns = f"density-{d % NAMESPACES}"
                t0 = time.monotonic()
                await client.create(
                    f"/apis/apps/v1/namespaces/{ns}/deployments", deployment(f"d{d}", args.pods_per_node)
                )
                create_latency.append(time.monotonic() - t0)
                for u in use.values():
                    u.sample()
            phases["creating"] = time.monotonic() - load_start

            async def all_running() -> bool:
                for u in use.values():
                    u.sample()
                return watcher.count >= total

            try:
                await wait_until(all_running, 120 + total / 10, f"{total} pods Running")
            except TimeoutError as err:  # say how far it got: the rate it managed is the figure then
                took = time.monotonic() - first
                raise TimeoutError(
                    f"{err} ({watcher.count} Running after {took:.0f} s, {watcher.count / took:.1f} pods/s)"
                ) from None
            saturation = time.monotonic() - first
            phases["starting the last pods"] = time.monotonic() - load_start

            async def fanned_out() -> bool:
                return bool(fanout.rounds)

            await wait_until(fanned_out, 30, "a Service write seen by the watchers")
            fanout_task.cancel()
            await asyncio.gather(fanout_task, return_exceptions=True)
            watch_fanout = {"connect_all_s": round(fanout_connect, 2), **await fanout.close()}
            bound = sorted(watcher.bound.values())
            throughput = (
                (len(bound) - 1) / (bound[-1] - bound[0])
                if len(bound) > 1 and bound[-1] > bound[0]
                else float("nan")
            )
            # Scale to 0 and delete, timed.
            t0 = time.monotonic()
            phases["all running (watch fan-out)"] = t0 - load_start
            for d in range(deployments):
                ns = f"density-{d % NAMESPACES}"
                await client.patch(
                    f"/apis/apps/v1/namespaces/{ns}/deployments/d{d}",
                    {"spec": {"replicas": 0}},
                    content_type=MERGE_PATCH,
                )

            async def no_pods() -> bool:
                items, _ = await client.list("/api/v1/pods", {"labelSelector": "app"})
                return not items

            await wait_until(no_pods, 120 + total / 10, "every pod gone after scaling to 0")
            scale_down = time.monotonic() - t0
            phases["scaling to 0"] = time.monotonic() - load_start
            for d in range(deployments):
                await client.delete(f"/apis/apps/v1/namespaces/density-{d % NAMESPACES}/deployments/d{d}")
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await scrapes.scrape()  # the load phase is over: the SLI's last edge
            phases["deleting the Deployments"] = time.monotonic() - load_start
            leading = await leaders(client, {name: use[name] for name in names})
        finally:
            for probe in probes.values():
                await probe.close()
            await scrapes.close()
        api_sli = apisli.report(scrapes.texts())  # decoded now, the measuring over
        calls, calls_by_server = prober.result()
        startup = figures(watcher.startup())
        held = {k: (calls[k]["p99"] <= SLO[k]) for k in calls}
        held["pod startup"] = startup["p99"] <= SLO["pod startup"]
        return {
            "nodes": nodes,
            "pods": total,
            "registration_s": round(registration, 2),
            "saturation_s": round(saturation, 2),
            "scale_to_zero_s": round(scale_down, 2),
            "phases_end_s": {name: round(end, 1) for name, end in phases.items()},
            "create_deployment": figures(create_latency),
            "calls": calls,
            "pod_startup": startup,
            "pod_startup_cl2": figures(watcher.startup_cl2()),
            "api_sli": api_sli,
            "bench_loop_lag": lag.result(),
            "scheduling_pods_per_s": round(throughput, 1),
            "watch_fanout": watch_fanout,
            "slo_held": held,
            "calls_by_server": calls_by_server,
            "processes": {
                k: {**u.result(), **({"leads": leading[k]} if k in leading else {})} for k, u in use.items()
            },
        }
    finally:
        if sim is not None and sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
            try:
                sim.wait(90)
            except subprocess.TimeoutExpired:
                sim.kill()
                sim.wait()
        plane.stop()
        if etcd is not None:
            etcd.stop()


async def main(args: argparse.Namespace, out: Path | None = None) -> dict[str, Any]:
    """Every size in --nodes, one after the other; with `out`, the report is written again as each size
    finishes, so a run stopped (or broken) at a larger N keeps the figures of the sizes it finished."""
    sizes = [int(n) for n in str(args.nodes).split(",")]
    runs: list[dict[str, Any]] = []
    result = {
        "store": args.store,
        "apiservers": args.apiservers,
        "pods_per_node": args.pods_per_node,
        "rate_pods_per_s": args.rate,
        "controller_manager_qps": args.controller_manager_qps or 20.0,
        "commit": git_commit(),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "slo_seconds": SLO,
        "definitions": DEFINITIONS,
        "runs": runs,
    }
    for nodes in sizes:
        load = os.getloadavg()
        with tempfile.TemporaryDirectory(prefix="density-bench-") as tmp:
            run = await one_size(Path(tmp), nodes, args)
        # The machine is shared: the load around each size stands beside its figures.
        runs.append({**run, "load_before": load, "load_after": os.getloadavg()})
        if out is not None:
            report(out, result)
    return result


def report(out: Path, result: dict[str, Any]) -> str:
    """The report of the sizes finished so far (JSON, markdown, SVG) into `out`; returns the markdown."""
    text = markdown(result)
    write_report(out, report_name(result.get("apiservers", 1)), result, text, svg(result))
    return text


def markdown(result: dict[str, Any]) -> str:
    commit = f" at {result['commit'][:12]}" if result.get("commit") else ""
    head = [
        f"# {title(result)}",
        "",
        f"load average before the run {tuple(round(x, 2) for x in result['load_average'])}, "
        f"{result['cpus']} CPUs, main{commit}",
        "",
    ]
    return "\n".join(head + tables(result)) + "\n"


def title(result: dict[str, Any]) -> str:
    """What was measured: the settings that make two runs the same benchmark."""
    count = result.get("apiservers", 1)
    servers = "one API server" if count == 1 else f"{count} API servers on one etcd"
    return (
        f"Density: simulated nodes, {result['pods_per_node']} pods per node through Deployments at "
        f"{result['rate_pods_per_s']} pods/s, store {result['store']}, {servers}, controller manager client "
        f"{result.get('controller_manager_qps', 20.0)} QPS"
    )


def tables(result: dict[str, Any]) -> list[str]:
    """The report's tables over every size of `result`: the client-timed figures and SLOs, upstream's SLI,
    each process tree."""
    lines = [
        "| nodes | pods | single p99 s | ns list p99 s | cluster list p99 s | startup p50 / p99 s | sched pods/s "
        "| SLOs held | API server CPU s / RSS MiB | watch fan-out: watchers, last watcher p50 / p99 s "
        "| load average before / after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["runs"]:
        held = ", ".join(k for k, ok in r["slo_held"].items() if ok)
        broken = ", ".join(k for k, ok in r["slo_held"].items() if not ok)
        api = "; ".join(
            f"{u['cpu_s']} / {u['peak_rss_mib']}"
            for n, u in r["processes"].items()
            if n.startswith("apiserver")
        )
        fan = r["watch_fanout"]
        lines.append(
            f"| {r['nodes']} | {r['pods']} | {r['calls']['single']['p99']} | {r['calls']['namespaced list']['p99']} "
            f"| {r['calls']['cluster list']['p99']} | {r['pod_startup']['p50']} / {r['pod_startup']['p99']} "
            f"| {r['scheduling_pods_per_s']} | {held or '-'}{' (broken: ' + broken + ')' if broken else ''} "
            f"| {api} "
            f"| {fan['watchers']}, {fan['last_watcher']['p50']} / {fan['last_watcher']['p99']} "
            f"| {_load(r.get('load_before'))} / {_load(r.get('load_after'))} |"
        )
    lines += sli_table(result["runs"])
    lines += [
        "",
        "Each process tree: its CPU seconds and peak RSS, by process, and the leader Leases it holds "
        "(with several API servers only the leaders' scheduler and controller manager work).",
        "",
        "| nodes | process tree | CPU s / peak RSS MiB | by process: CPU s / peak RSS MiB | leads |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in result["runs"]:
        for name, u in r["processes"].items():
            parts = ", ".join(
                f"{part} {p['cpu_s']} / {p['peak_rss_mib']}"
                for part, p in (u.get("by_process") or {}).items()
            )
            leads = ", ".join(u.get("leads") or []) or "-"
            lines.append(
                f"| {r['nodes']} | {name} | {u['cpu_s']} / {u['peak_rss_mib']} | {parts or '-'} | {leads} |"
            )
    return lines


def sli_table(runs: list[dict[str, Any]]) -> list[str]:
    """Upstream's SLI beside the client-timed figures above: per SLO class (scope), its worst group and
    whether it holds as ClusterLoader2 judges it; the bench's own loop lag and ClusterLoader2's pod
    startup under it."""
    measured = [r for r in runs if "api_sli" in r]
    if not measured:
        return []
    lines = [
        "",
        "API call latency by two definitions: the table above is client-timed (the bench's probe calls, "
        "its own event-loop lag included); the table below is upstream's SLI, timed inside the API servers "
        "(apiserver_request_sli_duration_seconds of every call), judged as ClusterLoader2's "
        "APIResponsivenessPrometheus judges it: p99 over 1-minute windows (its default) and over the whole "
        "run (its simple query), 1 s for scope=resource, 30 s otherwise (issue 36: 5 s for namespace scope).",
        "",
        "| nodes | class (scope) | threshold s (issue) | groups / calls | worst group (windows) "
        "| worst p50 / p90 / p99 s: windows | whole run | held: windows / whole run / issue | broken (windows) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in measured:
        sli = r["api_sli"]
        windows, whole = sli["windowed"]["classes"], sli["whole_run"]["classes"]
        for name, c in windows.items():
            w, o = c["worst"], whole[name]["worst"]
            if c["groups"] == 0 and whole[name]["groups"] == 0:
                continue
            issue = "-" if c["held_at_issue_slo"] is None else _yes(c["held_at_issue_slo"])
            broken = ", ".join(_broken(g, r.get("phases_end_s")) for g in c["broken"]) or "-"
            lines.append(
                f"| {r['nodes']} | {name} ({c['scope'] or '-'}) | {c['threshold_s']} ({c['issue_slo_s'] or '-'}) "
                f"| {c['groups']} / {c['calls']} | {_group(w) if w else '-'} | {_quantiles(w)} | {_quantiles(o)} "
                f"| {_yes(c['held'])} / {_yes(whole[name]['held'])} / {issue} | {broken} |"
            )
    lines.append("")
    for r in measured:
        lag, cl2, sli = r.get("bench_loop_lag") or {}, r.get("pod_startup_cl2") or {}, r["api_sli"]
        lines.append(
            f"{r['nodes']} nodes: {sli['scrapes']} scrapes over {sli['duration_s']} s "
            f"({sli['windowed']['windows']} windows judged, the last {sli['windowed']['judged_range_s']} s); "
            f"bench event-loop lag (100 ms ticker) p50 / p99 {lag.get('p50')} / {lag.get('p99')} s; "
            f"pod startup as ClusterLoader2 measures it p50 / p99 {cl2.get('p50')} / {cl2.get('p99')} s."
        )
    return lines


def _group(g: dict[str, Any]) -> str:
    """`VERB resource/subresource`; a non-resource call by its path (upstream puts it in subresource)."""
    if not g["resource"]:
        return f"{g['verb']} {g['subresource']}"
    return f"{g['verb']} {g['resource']}{'/' + g['subresource'] if g['subresource'] else ''}"


def _broken(g: dict[str, Any], phases: dict[str, float] | None) -> str:
    """A broken group, with its worst minute: when it ended, in which phase, its calls and p99."""
    w = g.get("worst_window")
    if not w:
        return _group(g)
    when = f"ending {w['end_s']} s in"
    phase = phase_at(phases or {}, w["end_s"])
    return f"{_group(g)} (worst minute {when}{', ' + phase if phase else ''}: {w['calls']} calls, p99 {w['p99']} s)"


def phase_at(phases: dict[str, float], at: float) -> str | None:
    """The phase of the load a moment `at` (seconds from its start) fell in: the first phase ending at or
    after it (`phases` in their order, each with its end)."""
    return next((name for name, end in phases.items() if at <= end), None)


def _quantiles(g: dict[str, Any] | None) -> str:
    return "-" if g is None else f"{g['p50']} / {g['p90']} / {g['p99']}"


def _yes(held: bool) -> str:
    return "held" if held else "BROKEN"


def _load(average: Any) -> str:
    return " ".join(f"{x:.2f}" for x in average) if average else "-"


def svg(result: dict[str, Any]) -> str:
    bars = []
    for r in result["runs"]:
        bars.append((f"{r['nodes']} nodes: pod startup p99", r["pod_startup"]["p99"]))
        bars.append((f"{r['nodes']} nodes: single-object p99", r["calls"]["single"]["p99"]))
        bars.append((f"{r['nodes']} nodes: cluster list p99", r["calls"]["cluster list"]["p99"]))
    return bar_svg("Latency against cluster size", bars, "s")


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="100,500,1000", help="comma-separated cluster sizes")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--rate", type=float, default=50.0, help="pods created per second")
    parser.add_argument("--store", choices=["etcd", "sqlite"], default="etcd")
    parser.add_argument(
        "--apiservers",
        type=int,
        default=1,
        help="API servers on the one etcd (N > 1 needs --store etcd), each with its scheduler and controller "
        "manager leader-electing; the simulated nodes, the watchers and the probes spread over them "
        "(report scale-density-Kapiservers.*, K the count)",
    )
    parser.add_argument("--watchers", type=int, default=1000, help="node watchers of every Service")
    parser.add_argument(
        "--controller-manager-qps",
        type=float,
        default=None,
        help="the controller manager's client QPS (burst 1.5 times it); unset: its default 20, burst 30, "
        "which holds creation through ReplicaSets near 20 pods/s",
    )
    add_run_options(parser)
    args = parser.parse_args()
    problem = apiservers_problem(args.apiservers, args.store)
    if problem:
        parser.error(problem)
    out = out_dir(parser, args)
    if args.smoke:
        args.nodes, args.pods_per_node, args.rate, args.watchers = "5", 4, 20.0, 5
    from kubeclient.eventloop import loop_factory

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        result = runner.run(main(args, out))
    print(markdown(result))


if __name__ == "__main__":
    cli()
