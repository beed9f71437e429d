"""Pod startup latency through the agent vs. the raw CRI floor, and the agent's idle cost (issue 4).

  python bench/agent/startup.py [--sizes 1,30,110] [--idle-seconds 30] [--out bench/results]
  python bench/agent/startup.py --smoke --out DIR     # 1 pod, 1 round, 2 idle pods: about 30 s

For each size N, in the same run on the same containerd:
  floor: N x (RunPodSandbox + CreateContainer + StartContainer) issued at once straight to CRI;
  (floor and agent alternate for several rounds at 1 and 30 pods, samples pooled, to even out load
  from anything else on the machine)
  agent: N pods created at once through the API; latency = the moment a watch shows the pod Running
         minus the moment the creation requests were sent (creationTimestamp has 1 s resolution, so it
         is reported beside, not used for the ratio).
Then with 110 pods running (--idle-pods): the agent's CPU seconds and RSS while idle. Figures are
reported, never asserted. The image is pre-pulled (upstream's pod-startup SLO also excludes pulls).
Writes agent-startup.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient, pb
from bench.perfprofile import Profile
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(pct(values, 50), 3), "p99": round(pct(values, 99), 3), "max": round(max(values), 3)}


async def raw_floor(cri: CRIClient, n: int, image: str, log_dir: Path) -> list[float]:
    """The same calls the agent makes for a one-container pod, made directly (no pod UID label, so the
    agent's orphan clean-up leaves them alone)."""

    async def one(i: int) -> tuple[float, str]:
        name = f"floor-{i}-{uuid.uuid4().hex[:6]}"
        sb = pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=str(uuid.uuid4()), namespace=NS),
            hostname=name,
            log_directory=str(log_dir / name),
            labels={"bench": "floor"},
            linux=pb.LinuxPodSandboxConfig(cgroup_parent=""),
        )
        sid = await cri.run_pod_sandbox(sb)
        cfg = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name="main"),
            image=pb.ImageSpec(image=image),
            command=["sleep", "3600"],
            log_path="main/0.log",
            labels={"bench": "floor"},
        )
        cid = await cri.create_container(sid, cfg, sb)
        await cri.start_container(cid)
        return time.monotonic(), sid

    t0 = time.monotonic()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    latencies = [t - t0 for t, _ in results]
    for _, sid in results:
        await cri.stop_pod_sandbox(sid)
        for c in await cri.list_containers(sandbox_id=sid):
            await cri.remove_container(c.id)
        await cri.remove_pod_sandbox(sid)
    return latencies


def pod_body(name: str, node: str, image: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


@dataclass(frozen=True)
class Size:
    """How much to run: the full benchmark, or a smoke run that only proves it still works."""

    sizes: tuple[int, ...] = (1, 30, 110)
    idle_pods: int = 110
    idle_seconds: float = 30.0
    settle_seconds: float = 10.0  # for the last status writes and event posts before an idle window
    rounds: int | None = None  # None: rounds_for(n)
    pyspy: str = ""  # py-spy's path: sample the agent during each size's rounds
    perf: bool = False  # `perf` samples of the agent during each size's rounds: its CPU seconds by category


SMOKE = Size(sizes=(1,), idle_pods=2, idle_seconds=1.0, settle_seconds=1.0, rounds=1)


def rounds_for(n: int) -> int:
    return 5 if n <= 1 else 3 if n <= 30 else 1


async def agent_run(
    client: KubeClient, n: int, node: str, image: str, tag: str = ""
) -> tuple[list[float], list[float]]:
    names = [f"p{n}{tag}-{i}" for i in range(n)]
    listing = await client.get(f"/api/v1/namespaces/{NS}/pods")
    rv = listing["metadata"]["resourceVersion"]
    running: dict[str, tuple[float, float]] = {}
    created: dict[str, float] = {}

    async def watch() -> None:
        async for ev in client.watch(
            f"/api/v1/namespaces/{NS}/pods", {"resourceVersion": rv, "timeoutSeconds": 600}
        ):
            pod = ev["object"]
            name = pod["metadata"]["name"]
            if name in running or name not in names or pod.get("status", {}).get("phase") != "Running":
                continue
            running[name] = (time.monotonic(), time.time())
            if pod["metadata"].get("creationTimestamp"):
                created[name] = datetime.fromisoformat(
                    pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")
                ).timestamp()
            if len(running) == n:
                return

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    await asyncio.gather(
        *(client.create(f"/api/v1/namespaces/{NS}/pods", pod_body(nm, node, image)) for nm in names)
    )
    CREATE_SECONDS.append(time.monotonic() - t0)
    await asyncio.wait_for(watcher, 300)
    from_send = [running[nm][0] - t0 for nm in names]
    from_creation = [running[nm][1] - created[nm] for nm in names if nm in created]
    return from_send, from_creation


# How long the API server took to accept each burst of creations (part of the agent's figure, not the
# floor's: it says how much of any gap is the control plane's rather than the node agent's).
CREATE_SECONDS: list[float] = []


async def ensure_namespace(client: KubeClient, namespace: str = NS) -> None:
    """A bench's namespace, created unless it is there."""
    try:
        await client.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    except ApiError as err:
        if not err.conflict:
            raise


async def delete_all(client: KubeClient) -> None:
    pods = (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
    await asyncio.gather(
        *(client.delete(f"/api/v1/namespaces/{NS}/pods/{p['metadata']['name']}") for p in pods)
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("pods not removed within 120 s")


class ProcWatch:
    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.cpu0 = self._cpu()
        self.sys0 = self.proc.cpu_times().system
        self.t0 = time.monotonic()
        self.max_rss = self.proc.memory_info().rss

    def _cpu(self) -> float:
        t = self.proc.cpu_times()
        return t.user + t.system

    def sample(self) -> None:
        self.max_rss = max(self.max_rss, self.proc.memory_info().rss)

    def result(self) -> dict[str, float]:
        self.sample()
        secs = time.monotonic() - self.t0
        cpu = self._cpu() - self.cpu0
        kernel = self.proc.cpu_times().system - self.sys0
        return {
            "cpu_seconds": round(cpu, 3),
            "kernel_cpu_seconds": round(kernel, 3),
            "wall_seconds": round(secs, 2),
            "cpu_percent_of_core": round(100 * cpu / secs, 2),
            "max_rss_mib": round(self.max_rss / 2**20, 1),
        }


async def sampled(watch: ProcWatch, coro):
    task = asyncio.ensure_future(coro)
    while not task.done():
        watch.sample()
        await asyncio.wait({task}, timeout=0.5)
    return task.result()


class PySpy:
    """py-spy sampling a process (--pyspy): its raw stacks, grouped at the end by the module each
    sample's innermost frame of our code (agent, kubeclient, ...) lies in, else by the innermost
    library, so that each second of the agent's CPU has a name."""

    def __init__(self, binary: str, pid: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--rate", "50", "--nonblocking"]
            + ["--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, float]:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        groups: dict[str, int] = {}
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            paths = [m.group(1) for m in re.finditer(r"\(([^()]*?):\d+\)", stack)]
            ours = [p for p in paths if re.search(r"(?:^|/)(agent|kubeclient)/", p)]
            if ours:
                key = re.split(r"/(?=(?:agent|kubeclient)/)", ours[-1])[-1]
                if paths[-1] != ours[-1]:  # time spent in a library called from this module
                    key += " -> " + "/".join(paths[-1].split("/")[-2:])
            elif paths and "site-packages/" in paths[-1]:
                key = paths[-1].split("site-packages/")[1].split("/")[0]
            else:
                key = "/".join(paths[-1].split("/")[-2:]) if paths else stack[:60]
            groups[key] = groups.get(key, 0) + int(count)
        total = sum(groups.values()) or 1
        top = sorted(groups.items(), key=lambda kv: -kv[1])[:40]
        return {k: round(100 * v / total, 1) for k, v in top}


def seconds_by_category(profile: Profile, cpu_seconds: float) -> dict:
    """The burst's CPU seconds split by perf's categories (gRPC here is the CRI client, not etcd's)."""
    if profile.skipped:
        return {"skipped": profile.skipped}
    split = {
        name.replace("etcd gRPC client", "gRPC client (CRI)"): round(pct / 100 * cpu_seconds, 2)
        for name, pct in profile.categories.items()
    }
    return {"seconds_by_category": split, "top_symbols_pct": profile.top_symbols}


def status_patches(stack: Stack) -> float:
    """PATCHes of pods/status the API server has answered so far (its apiserver_request_total)."""
    text = subprocess.run(
        ["kubectl", "--kubeconfig", str(stack.kubeconfig), "get", "--raw", "/metrics"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    wanted = ('verb="PATCH"', 'resource="pods"', 'subresource="status"')
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("apiserver_request_total{") and all(w in line for w in wanted)
    )


async def bench(stack: Stack, size: Size) -> dict:
    assert stack.images and stack.containerd and stack.agent and stack.agent.pid
    image = stack.images.busybox_pinned
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    cri = await CRIClient.connect(stack.containerd.endpoint)
    await cri.pull_image(image)
    await ensure_namespace(client)
    report: dict = {"sizes": {}}
    log_dir = stack.config.state_dir / "floor-logs"
    sizes = list(size.sizes)
    for n in sizes:
        # Floor and agent alternate, several rounds for the smaller sizes, and the samples are pooled:
        # the machine is shared, and load that shifts between two single runs would skew their ratio.
        rounds = size.rounds or rounds_for(n)
        floor: list[float] = []
        from_send: list[float] = []
        from_creation: list[float] = []
        watch = ProcWatch(stack.agent.pid)
        spy = (
            PySpy(
                size.pyspy,
                stack.agent.pid,
                Path(tempfile.gettempdir()) / f"agent-pyspy-{os.getpid()}-{n}.txt",
            )
            if size.pyspy
            else None
        )
        profile = Profile(stack.agent.pid) if size.perf else None
        if profile is not None:
            await asyncio.to_thread(profile.__enter__)
        CREATE_SECONDS.clear()
        patches0 = status_patches(stack)
        for r in range(rounds):
            floor += await raw_floor(cri, n, image, log_dir)
            sent, created = await sampled(watch, agent_run(client, n, stack.node_name, image, tag=f"r{r}"))
            from_send += sent
            from_creation += created
            if r < rounds - 1:
                await delete_all(client)
        burst = watch.result()
        if profile is not None:
            await asyncio.to_thread(profile.__exit__, None, None, None)
            burst["perf"] = seconds_by_category(profile, burst["cpu_seconds"])
        # counted once the last status writes of the burst are in (the pods are Running by now)
        await asyncio.sleep(size.settle_seconds)
        burst["status_patches_per_pod"] = round((status_patches(stack) - patches0) / (n * rounds), 2)
        if spy is not None:
            burst["pyspy_pct_by_module"] = spy.stop()
        entry = {
            "floor": summary(floor),
            "agent": summary(from_send),
            "agent_from_creationTimestamp": summary(from_creation) if from_creation else None,
            "ratio_p50": round(pct(from_send, 50) / pct(floor, 50), 2),
            "ratio_p99": round(pct(from_send, 99) / pct(floor, 99), 2),
            "rounds": rounds,
            "api_create_seconds_median": round(sorted(CREATE_SECONDS)[len(CREATE_SECONDS) // 2], 3),
            "agent_during_burst": burst,
        }
        report["sizes"][str(n)] = entry
        print(f"N={n}: {json.dumps(entry)}", flush=True)
        if n != sizes[-1] or n != size.idle_pods:
            await delete_all(client)
    if sizes[-1] != size.idle_pods:
        await agent_run(client, size.idle_pods, stack.node_name, image, tag="idle")
    await asyncio.sleep(size.settle_seconds)  # let the last status writes and event posts settle
    watch = ProcWatch(stack.agent.pid)
    deadline = time.monotonic() + size.idle_seconds
    while time.monotonic() < deadline:
        watch.sample()
        await asyncio.sleep(min(1.0, size.idle_seconds))
    report["idle"] = {"pods": size.idle_pods, **watch.result()}
    print(f"idle with {size.idle_pods} pods: {json.dumps(report['idle'])}", flush=True)
    await delete_all(client)
    await cri.close()
    await client.close()
    return report


def svg_plot(report: dict) -> str:
    """A small grouped bar chart (p50 and p99, floor vs agent, per size) without plotting libraries."""
    sizes = list(report["sizes"])
    bars = []
    for n in sizes:
        e = report["sizes"][n]
        bars += [
            (f"{n} floor p50", e["floor"]["p50"]),
            (f"{n} agent p50", e["agent"]["p50"]),
            (f"{n} floor p99", e["floor"]["p99"]),
            (f"{n} agent p99", e["agent"]["p99"]),
        ]
    top = max(v for _, v in bars) or 1
    width, height, bw = 60 + 40 * len(bars), 260, 28
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 110}" font-family="sans-serif" font-size="10">',
        '<text x="10" y="14" font-size="12">pod startup latency (s): raw CRI floor vs agent</text>',
    ]
    for i, (label, v) in enumerate(bars):
        h = v / top * height
        x = 40 + i * 40
        color = "#999" if "floor" in label else "#2a6ebb"
        out.append(f'<rect x="{x}" y="{20 + height - h:.1f}" width="{bw}" height="{h:.1f}" fill="{color}"/>')
        out.append(f'<text x="{x}" y="{16 + height - h:.1f}">{v:.2f}</text>')
        out.append(f'<text transform="translate({x + 10},{height + 26}) rotate(60)">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


def markdown(report: dict) -> str:
    lines = [
        "# Agent pod startup vs raw CRI floor",
        "",
        "| pods | rounds | floor p50 | floor p99 | agent p50 | agent p99 | ratio p50 | ratio p99 | API create s | agent CPU s (burst) | agent max RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, e in report["sizes"].items():
        lines.append(
            f"| {n} | {e['rounds']} | {e['floor']['p50']} | {e['floor']['p99']} | {e['agent']['p50']} | {e['agent']['p99']} | {e['ratio_p50']} | {e['ratio_p99']} | {e['api_create_seconds_median']} | {e['agent_during_burst']['cpu_seconds']} | {e['agent_during_burst']['max_rss_mib']} |"
        )
    idle = report["idle"]
    lines += [
        "",
        "Status PATCHes per pod during each size's rounds (the API server's apiserver_request_total): "
        + ", ".join(
            f"{n} pods {e['agent_during_burst'].get('status_patches_per_pod')}"
            for n, e in report["sizes"].items()
        ),
        "",
        f"Idle with {idle['pods']} pods over {idle['wall_seconds']} s: {idle['cpu_percent_of_core']} % of one core, max RSS {idle['max_rss_mib']} MiB.",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="pods per burst, e.g. 1,30,110")
    parser.add_argument("--idle-seconds", type=float, default=None)
    parser.add_argument("--idle-pods", type=int, default=None)
    parser.add_argument("--pyspy", default="", help="py-spy binary: where the agent's CPU goes, by module")
    parser.add_argument("--perf", action="store_true", help="perf: the agent's CPU seconds by category")
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = replace(SMOKE if args.smoke else Size(), pyspy=args.pyspy, perf=args.perf)
    if args.sizes:
        size = replace(size, sizes=tuple(int(s) for s in args.sizes.split(",")))
    if args.idle_seconds is not None:
        size = replace(size, idle_seconds=args.idle_seconds)
    if args.idle_pods is not None:
        size = replace(size, idle_pods=args.idle_pods)
    report = run_on_stack(lambda stack: bench(stack, size), tag="n")
    text = markdown(report)
    write_report(out, "agent-startup", report, text, svg_plot(report))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
