"""What the workload-controller benches share (Deployment, DaemonSet, Job, StatefulSet): each times a
controller's object against a floor of the same pods the bench creates itself, in the same run.

Two definitions are reported side by side, each round running both (issue 36: a benchmark's definition
never changes after a miss; the new one stands beside the old):
- from `kubectl apply` (the definition the workload issues gave): the controller's object is sent by a
  `kubectl apply -f` process, the clock running from that process's start (its start-up, discovery and
  the request, 0.1-0.2 s here, as much as a whole DaemonSet rollout on three nodes, are in it);
- in-process (the later one): one in-process client sends the objects on both sides (the floor's pods,
  or the controller's one object), so the ratio holds what the controllers and the scheduler add and
  nothing else; `kubectl_seconds` times one `kubectl create --dry-run=server` of the same manifest
  beside it.
The floor is the same for both: the bench's own pods, sent by the in-process client.

A `Window` is one measured phase: watches opened at one resourceVersion before the clock starts, the
store's revision then and after (each write moves it once: pods, bindings, statuses, finalizer removals,
events, owners), and the CPU the named components spent meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

from agent.cri import CRIClient
from bench.agent.startup import ProcWatch
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from nodesim.nodeobjects import SIMULATED_LABEL
from nodesim.settings import SimSettings
from pykubelet.rig.stack import Stack

Obj = dict[str, Any]
TIMEOUT = 600.0


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def revision(client: KubeClient) -> int:
    """The store's newest revision: a list's resourceVersion."""
    return int((await client.get("/api/v1/namespaces", limit=1))["metadata"]["resourceVersion"])


class Watcher:
    """One watch of a collection from a resourceVersion, counting events and keeping the objects."""

    def __init__(self, client: KubeClient, path: str, rv: str, on_event: Callable[[], None] | None = None):
        self.objects: dict[str, Obj] = {}
        self.modified = 0
        self.added = 0
        self.on_event = on_event
        self.task = asyncio.create_task(self._run(client, path, rv))

    async def _run(self, client: KubeClient, path: str, rv: str) -> None:
        async for event in client.watch(path, {"resourceVersion": rv, "timeoutSeconds": 900}):
            obj = event["object"]
            name = obj["metadata"]["name"]
            if event["type"] == "ADDED":
                self.added += 1
            elif event["type"] == "MODIFIED":
                self.modified += 1
            if event["type"] == "DELETED":
                self.objects.pop(name, None)
            elif event["type"] in ("ADDED", "MODIFIED"):
                self.objects[name] = obj
            if self.on_event is not None:
                self.on_event()

    @property
    def changes(self) -> int:
        return self.added + self.modified

    def stop(self) -> None:
        self.task.cancel()


class Window:
    """One measured phase (see the module's docstring). `async with Window(...) as w:` opens the watches,
    starts the clock, and `w.until(cond)` waits for the watch event that makes `cond()` true."""

    def __init__(
        self,
        client: KubeClient,
        paths: dict[str, str],
        procs: dict[str, int] | None = None,
        on_event: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.paths = paths
        self.procs = procs or {}
        self.on_event = on_event
        self.watch: dict[str, Watcher] = {}
        self.wake = asyncio.Event()
        self.t0 = 0.0
        self.before = 0
        self.cpu: dict[str, ProcWatch] = {}

    def _woken(self) -> None:
        if self.on_event is not None:
            self.on_event()
        self.wake.set()

    async def __aenter__(self) -> Window:
        rv = (await self.client.get(next(iter(self.paths.values()))))["metadata"]["resourceVersion"]
        self.watch = {name: Watcher(self.client, path, rv, self._woken) for name, path in self.paths.items()}
        self.cpu = {name: ProcWatch(pid) for name, pid in self.procs.items()}
        await asyncio.sleep(0.2)  # the watches are established
        self.before = await revision(self.client)
        self.t0 = time.monotonic()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self.watch.values():
            w.stop()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    async def until(self, cond: Callable[[], bool], timeout: float = TIMEOUT) -> float:
        """Seconds since the clock started once `cond()` holds, checked after every watch event."""
        while not cond():
            await asyncio.wait_for(self.wake.wait(), timeout)
            self.wake.clear()
        return self.elapsed()

    async def costs(self, settle: float = 0.0) -> Obj:
        """Store writes and CPU so far, after `settle` seconds in which what the controllers still do
        after the fact is counted too."""
        if settle:
            await asyncio.sleep(settle)
        out: Obj = {"store_writes": await revision(self.client) - self.before}
        if self.cpu:
            out["cpu_seconds"] = {name: w.result()["cpu_seconds"] for name, w in self.cpu.items()}
        return out


class Phases:
    """When a pod watch first showed each pod created, bound to the node, and Ready."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.window: Window | None = None

    def seen(self) -> None:
        now = time.monotonic()
        for name, pod in (self.window.watch["pods"].objects if self.window else {}).items():
            self.created.setdefault(name, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
            if is_ready(pod):
                self.ready.setdefault(name, now)

    def last(self, since: float) -> dict[str, float]:
        """Seconds from `since` to the last pod created, bound and Ready."""
        return {
            kind: round(max(seen.values()) - since, 3) if seen else 0.0
            for kind, seen in (("created", self.created), ("bound", self.bound), ("ready", self.ready))
        }

    def medians(self, names: list[str]) -> dict[str, float]:
        """Median seconds per pod: Ready of one to the next one created (the controller's turn), created
        to bound (the scheduler's), bound to Ready (the agent's)."""

        def median(values: list[float]) -> float:
            return round(statistics.median(values), 3) if values else 0.0

        return {
            "ready_to_next_created": median(
                [
                    self.created[b] - self.ready[a]
                    for a, b in zip(names, names[1:], strict=False)
                    if a in self.ready and b in self.created
                ]
            ),
            "created_to_bound": median([self.bound[n] - self.created[n] for n in names if n in self.bound]),
            "bound_to_ready": median([self.ready[n] - self.bound[n] for n in names if n in self.ready]),
        }


def watched(
    client: KubeClient, paths: dict[str, str], procs: dict[str, int] | None = None
) -> tuple[Window, Phases]:
    phases = Phases()
    w = phases.window = Window(client, paths, procs, on_event=phases.seen)
    return w, phases


def component_pids(stack: Stack) -> dict[str, int]:
    assert stack.apiserver is not None and stack.agent is not None
    pids = {"apiserver": stack.apiserver.pid, "agent": stack.agent.pid}
    for child in psutil.Process(stack.apiserver.pid).children(recursive=True):
        cmd = " ".join(child.cmdline())
        for name in ("controller-manager", "scheduler"):
            if f"pykubelet {name}" in cmd:
                pids[name] = child.pid
    return {k: v for k, v in pids.items() if v}


async def prepare(stack: Stack, namespace: str) -> tuple[KubeClient, str]:
    """The bench's client, its namespace, and the pinned busybox pulled on every node."""
    assert stack.images and stack.containerd
    image = stack.images.busybox_pinned
    for endpoint in (stack.containerd.endpoint, *(n.containerd.endpoint for n in stack.extra_nodes)):
        cri = await CRIClient.connect(endpoint)
        try:
            await cri.pull_image(image)
        finally:
            await cri.close()
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    try:
        await client.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    except ApiError as err:
        if not err.conflict:
            raise
    return client, image


async def kubectl_seconds(kubeconfig: Path, body: Obj) -> float:
    """How long `kubectl create --dry-run=server -f` of `body` takes: the user's own wait before any
    controller sees the object (process start, discovery, the request)."""
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-kubectl-")[1])
    try:
        manifest.write_text(json.dumps(body))
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "create",
            "--dry-run=server",
            "-f",
            str(manifest),
            stdout=asyncio.subprocess.DEVNULL,
        )
        if await proc.wait() != 0:
            raise RuntimeError("kubectl create --dry-run=server failed")
        return round(time.monotonic() - t0, 3)
    finally:
        manifest.unlink()


async def watch_until(
    client: KubeClient,
    path: str,
    params: dict[str, str],
    done: Callable[[dict[str, Obj]], bool],
    bound: float,
) -> None:
    """Until `done(objects by name)` holds for the collection at `path` (a list, then its watch from the
    list's resourceVersion, listed again if the server ends the watch); TimeoutError after `bound` s."""
    async with asyncio.timeout(bound):
        while True:
            listed = await client.get(path, **params)
            objects = {o["metadata"]["name"]: o for o in listed["items"]}
            if done(objects):
                return
            rv = listed["metadata"]["resourceVersion"]
            async for event in client.watch(path, {**params, "resourceVersion": rv}):
                name = event["object"]["metadata"]["name"]
                if event["type"] == "DELETED":
                    objects.pop(name, None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    objects[name] = event["object"]
                if done(objects):
                    return


def node_schedulable(node: Obj) -> bool:
    """Ready, and without the not-ready taint the node lifecycle controller keeps until it saw so."""
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    taints = (node.get("spec") or {}).get("taints") or []
    return ready and not any(t.get("key") == "node.kubernetes.io/not-ready" for t in taints)


class SimulatedNodes:
    """`pykubelet simulate --nodes N` beside a stack's real nodes for the time of a bench, run as a user
    runs it: entered once its N nodes are Ready and schedulable; left by SIGTERM, on which it removes its
    nodes, their Leases and the pods bound to them. Its pods run at once (`--start-delay 0s`: no image
    pull or container start stands behind them)."""

    PREFIX = "bsim-"
    BOUND = 120.0  # seconds for the registration, and again for the stop

    def __init__(self, client: KubeClient, kubeconfig: Path, count: int, log: Path) -> None:
        self.client, self.kubeconfig, self.count, self.log = client, kubeconfig, count, log
        self.names = SimSettings(nodes=count, prefix=self.PREFIX).node_names() if count else []
        self.proc: subprocess.Popen[bytes] | None = None

    async def __aenter__(self) -> SimulatedNodes:
        if not self.count:
            return self
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable, "-m", "pykubelet", "simulate", "--kubeconfig", str(self.kubeconfig),
                    f"--nodes={self.count}", f"--name-prefix={self.PREFIX}", "--start-delay=0s",
                    "--kube-api-qps=1000", "--kube-api-burst=2000",
                ],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        wanted = set(self.names)
        try:
            await watch_until(
                self.client,
                "/api/v1/nodes",
                {"labelSelector": f"{SIMULATED_LABEL}=true"},
                lambda nodes: wanted <= {n for n, node in nodes.items() if node_schedulable(node)},
                self.BOUND,
            )
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, self.BOUND)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)
            raise RuntimeError(f"pykubelet simulate did not stop on SIGTERM (see {self.log})") from None
        if code != 0 and (not exc or exc[0] is None):  # a failing bench's own error goes first
            raise RuntimeError(f"pykubelet simulate exited {code} (see {self.log})")


Via = str  # how the controller's object is sent: "client" (in-process) or "kubectl" (kubectl apply -f)
VIAS: tuple[Via, ...] = ("client", "kubectl")


async def send(client: KubeClient, kubeconfig: Path, via: Via, path: str, body: Obj) -> None:
    """Create the controller's object `via` the in-process client or a `kubectl apply -f` process (the
    caller's clock is already running, so kubectl's own start-up is in the figure)."""
    if via == "client":
        await client.create(path, body)
        return
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-apply-")[1])
    try:
        manifest.write_text(json.dumps(body))
        proc = await asyncio.create_subprocess_exec(
            "kubectl", "--kubeconfig", str(kubeconfig), "apply", "-f", str(manifest),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl apply failed: {err.decode(errors='replace').strip()}")
    finally:
        manifest.unlink()


async def delete_everything(
    client: KubeClient, namespace: str, owners: list[str], also: tuple[str, ...] = ()
) -> None:
    """Delete the owner collections' objects (resource paths under the namespace, e.g. `apps/v1/
    daemonsets`) in the background, then every pod, until pods, owners and `also` are all gone."""

    def path(resource: str) -> str:
        group_version, _, plural = resource.rpartition("/")
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        return f"{prefix}/namespaces/{namespace}/{plural}"

    for owner in map(path, owners):
        for item in (await client.get(owner))["items"]:
            try:
                await client.delete(
                    f"{owner}/{item['metadata']['name']}", {"propagationPolicy": "Background"}
                )
            except ApiError as err:
                if not err.not_found:
                    raise
    pods_path = path("v1/pods")
    rest = [path(r) for r in (*owners, *also)]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = (await client.get(pods_path))["items"]
        if not pods and not any([(await client.get(p))["items"] for p in rest]):
            return
        await asyncio.gather(
            *(
                client.delete(f"{pods_path}/{p['metadata']['name']}")
                for p in pods
                if not p["metadata"].get("deletionTimestamp")
            ),
            return_exceptions=True,
        )
        await asyncio.sleep(0.5)
    raise RuntimeError(f"the bench's objects in {namespace} not removed within 180 s")


async def alternate(
    rounds: int,
    name: str,
    floor: Callable[[int], Awaitable[Obj]],
    phase: Callable[[Via], Awaitable[Obj]],
    cleanup: Callable[[], Awaitable[None]],
    vias: tuple[Via, ...] = VIAS,
) -> Obj:
    """Floor, then the controller's phase under each definition in `vias` (in-process, and from `kubectl
    apply` unless the bench has no controller object to apply), in turn, everything gone between them (the
    machine is shared, so a ratio is of neighbouring measurements); medians over the rounds.
    `report[name]` is the in-process phase, `report[name + "_kubectl"]` the kubectl one."""
    report: Obj = {"rounds": []}
    keys = {via: name if via == "client" else f"{name}_{via}" for via in vias}
    for r in range(rounds):
        base = await floor(r)
        await cleanup()
        entry: Obj = {"floor": base}
        for via in vias:
            entry[keys[via]] = await phase(via)
            await cleanup()
        entry["ratio"] = round(entry[name]["seconds"] / base["seconds"], 2)
        if "kubectl" in keys:
            entry["kubectl_ratio"] = round(entry[keys["kubectl"]]["seconds"] / base["seconds"], 2)
        report["rounds"].append(entry)
        print(f"round {r}: {json.dumps(entry)}", flush=True)
    floors = [e["floor"]["seconds"] for e in report["rounds"]]
    report["floor_seconds_median"] = round(statistics.median(floors), 3)
    ratios = {"client": "ratio_of_medians", "kubectl": "kubectl_ratio_of_medians"}
    for via, key in keys.items():
        median = round(statistics.median([e[key]["seconds"] for e in report["rounds"]]), 3)
        report[f"{key}_seconds_median"] = median
        report[ratios[via]] = round(median / report["floor_seconds_median"], 2)
    report["goal"] = f"{name} <= 1.3 x floor" + (" (either definition)" if len(vias) > 1 else "")
    return report


Column = tuple[str, Callable[[Obj, Obj], Any]]  # header, (floor, phase) -> cell


def report_markdown(report: Obj, title: str, name: str, label: str, columns: list[Column]) -> str:
    """Title, one row a round (floor and phase seconds, the ratio, the bench's own `columns`, store writes
    and CPU), and the medians' verdict."""
    cols: list[Column] = [
        ("floor s", lambda f, _p: f["seconds"]),
        (f"{name} s", lambda _f, p: p["seconds"]),
        *columns,
        ("kubectl create s", lambda _f, p: p["kubectl_seconds"]),
        ("store writes floor", lambda f, _p: f["store_writes"]),
        (f"store writes {name}", lambda _f, p: p["store_writes"]),
        ("controller-manager CPU s", lambda _f, p: p["cpu_seconds"].get("controller-manager", "-")),
        ("API server CPU s", lambda _f, p: p["cpu_seconds"].get("apiserver", "-")),
    ]
    applied = f"{name}_kubectl"
    both = "kubectl_ratio_of_medians" in report
    extra = ["ratio from kubectl apply", "from kubectl apply s"] if both else []
    lines = [
        f"# {title}",
        "",
        "| round | ratio | " + " | ".join([*extra, *(h for h, _ in cols)]) + " |",
        "|---|---|" + "---|" * (len(cols) + len(extra)),
    ]
    for i, e in enumerate(report["rounds"]):
        cells = [str(e["kubectl_ratio"]), str(e[applied]["seconds"])] if both else []
        cells += [str(get(e["floor"], e[name])) for _, get in cols]
        lines.append(f"| {i} | {e['ratio']} | " + " | ".join(cells) + " |")
    in_process = f"median {label} {report[f'{name}_seconds_median']} s, ratio {report['ratio_of_medians']}"
    if both:
        verdict = (
            f"Median floor {report['floor_seconds_median']} s. From `kubectl apply` (the issue's definition): "
            f"median {label} {report[f'{applied}_seconds_median']} s, ratio "
            f"{report['kubectl_ratio_of_medians']}. In-process (both sides sent by one client): "
            f"{in_process}. Goal: at most 1.3."
        )
    else:
        verdict = f"Median floor {report['floor_seconds_median']} s, {in_process} (goal: at most 1.3)."
    return "\n".join([*lines, "", verdict, ""])


def round_bars(report: Obj, name: str, *extra: tuple[str, str]) -> list[tuple[str, float]]:
    """Each round's floor and phase seconds, then any `(label, key)` of the phase's."""
    bars: list[tuple[str, float]] = []
    for i, e in enumerate(report["rounds"]):
        bars += [(f"r{i} floor", e["floor"]["seconds"]), (f"r{i} {name}", e[name]["seconds"])]
        if f"{name}_kubectl" in e:
            bars.append((f"r{i} {name} kubectl", e[f"{name}_kubectl"]["seconds"]))
        bars += [(f"r{i} {label}", e[name][key]) for label, key in extra]
    return bars


def bars_svg(title: str, bars: list[tuple[str, float]]) -> str:
    """Seconds as bars: grey for a floor, light blue for a status figure, blue for the controller."""
    top = max((v for _, v in bars), default=0) or 1
    width, height, bw = 60 + 60 * len(bars), 240, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 100}" '
        'font-family="sans-serif" font-size="10">',
        f'<text x="10" y="14" font-size="12">{title}</text>',
    ]
    for i, (label, v) in enumerate(bars):
        h = v / top * height
        x = 40 + i * 60
        color = "#999" if "floor" in label else ("#7fa8d8" if "status" in label else "#2a6ebb")
        out.append(f'<rect x="{x}" y="{20 + height - h:.1f}" width="{bw}" height="{h:.1f}" fill="{color}"/>')
        out.append(f'<text x="{x}" y="{16 + height - h:.1f}">{v:.2f}</text>')
        out.append(f'<text transform="translate({x + 10},{height + 26}) rotate(60)">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)
