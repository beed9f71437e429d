"""A Deployment of N replicas from `kubectl apply` to N Ready pods, against the floor of N pods the
bench creates itself, pre-bound to the node, in the same run (issue 12; goal: at most 1.3x the floor).

  python bench/controllers/deployment.py [--replicas 100] [--rounds 2] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor:      N pods with the Deployment's pod template and spec.nodeName set, created at once through
              the API; time until a watch has seen all N Ready;
  deployment: `kubectl apply -f` of a Deployment with that template and N replicas (the controller
              creates the ReplicaSet, the ReplicaSet controller the pods, the scheduler binds them);
              time until a watch has seen all N Ready, and until the Deployment's status says N
              available. Also counted: the writes each phase cost the store (its revision moves once per
              write: pods, bindings, statuses, events, ReplicaSets) and how often the Deployment and its
              ReplicaSet objects changed, and the CPU of the controller manager, the API server and the
              agent. Floor and deployment alternate (the machine is shared, so the ratio is of
              neighbouring measurements); between them everything is deleted and gone.
Figures are reported, never asserted. `--smoke`: 10 replicas, 1 round (for CI).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from bench.agent.startup import ProcWatch
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-deploy"
APP = "web"
SERVE = "exec httpd -f -p 8080"
Obj = dict[str, Any]


def template(image: str) -> Obj:
    return {
        "metadata": {"labels": {"app": APP}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SERVE],
                }
            ],
        },
    }


def floor_pod(name: str, node: str, image: str) -> Obj:
    t = template(image)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, **t["metadata"]},
        "spec": {**t["spec"], "nodeName": node},
    }


def deployment(replicas: int, image: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": template(image),
        },
    }


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

    def __init__(self, client: KubeClient, path: str, rv: str, on_event: Any = None) -> None:
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

    def stop(self) -> None:
        self.task.cancel()


async def ready_after(client: KubeClient, n: int, start: Any) -> tuple[float, int, int]:
    """Run `start()` (returns when it has sent its requests), then wait until a pod watch saw n Ready
    pods. (seconds from just before start to n Ready, store writes meanwhile, seconds start took)."""
    listing = await client.get(f"/api/v1/namespaces/{NS}/pods")
    rv = listing["metadata"]["resourceVersion"]
    done = asyncio.Event()
    pods: Watcher | None = None

    def check() -> None:
        if pods is not None and sum(is_ready(p) for p in pods.objects.values()) >= n:
            done.set()

    pods = Watcher(client, f"/api/v1/namespaces/{NS}/pods", rv, check)
    await asyncio.sleep(0.2)  # the watch is established
    before = await revision(client)
    t0 = time.monotonic()
    await start()
    sent = time.monotonic() - t0
    await asyncio.wait_for(done.wait(), 600)
    seconds = time.monotonic() - t0
    pods.stop()
    return seconds, await revision(client) - before, round(sent, 3)


async def floor_round(client: KubeClient, n: int, node: str, image: str, tag: str) -> dict:
    async def start() -> None:
        await asyncio.gather(
            *(
                client.create(f"/api/v1/namespaces/{NS}/pods", floor_pod(f"floor-{tag}-{i}", node, image))
                for i in range(n)
            )
        )

    seconds, writes, sent = await ready_after(client, n, start)
    return {"seconds": round(seconds, 3), "store_writes": writes, "create_seconds": sent}


async def deployment_round(
    client: KubeClient, kubeconfig: Path, n: int, image: str, procs: dict[str, int]
) -> dict:
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-deploy-")[1])
    manifest.write_text(json.dumps(deployment(n, image)))
    rv = (await client.get(f"/apis/apps/v1/namespaces/{NS}/deployments"))["metadata"]["resourceVersion"]
    deployments = Watcher(client, f"/apis/apps/v1/namespaces/{NS}/deployments", rv)
    replicasets = Watcher(client, f"/apis/apps/v1/namespaces/{NS}/replicasets", rv)
    watches = {name: ProcWatch(pid) for name, pid in procs.items()}
    applied: dict[str, float] = {}

    async def start() -> None:
        t = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "-f",
            str(manifest),
            stdout=asyncio.subprocess.DEVNULL,
        )
        if await proc.wait() != 0:
            raise RuntimeError("kubectl apply failed")
        applied["seconds"] = time.monotonic() - t

    t0 = time.monotonic()
    seconds, writes, _ = await ready_after(client, n, start)
    while True:  # the controller's own account of it
        d = deployments.objects.get(APP) or {}
        st = d.get("status") or {}
        if (
            st.get("availableReplicas") == n
            and st.get("updatedReplicas") == n
            and st.get("observedGeneration")
        ):
            break
        await asyncio.sleep(0.05)
    status_seconds = time.monotonic() - t0
    await asyncio.sleep(3)  # anything the controllers still do after the fact is counted too
    deployments.stop()
    replicasets.stop()
    manifest.unlink()
    return {
        "seconds": round(seconds, 3),
        "status_available_seconds": round(status_seconds, 3),
        "kubectl_apply_seconds": round(applied["seconds"], 3),
        "store_writes": writes,
        "deployment_changes": deployments.added + deployments.modified,
        "replicaset_changes": replicasets.added + replicasets.modified,
        "cpu_seconds": {name: w.result()["cpu_seconds"] for name, w in watches.items()},
    }


async def delete_everything(client: KubeClient) -> None:
    for path in (f"/apis/apps/v1/namespaces/{NS}/deployments", f"/apis/apps/v1/namespaces/{NS}/replicasets"):
        for item in (await client.get(path))["items"]:
            try:
                await client.delete(f"{path}/{item['metadata']['name']}")
            except ApiError as err:
                if not err.not_found:
                    raise
    pods_path = f"/api/v1/namespaces/{NS}/pods"
    pods = (await client.get(pods_path))["items"]
    await asyncio.gather(
        *(client.delete(f"{pods_path}/{p['metadata']['name']}") for p in pods), return_exceptions=True
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if not (await client.get(pods_path))["items"]:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError("pods not removed within 180 s")


def component_pids(stack: Stack) -> dict[str, int]:
    assert stack.apiserver is not None and stack.agent is not None
    pids = {"apiserver": stack.apiserver.pid, "agent": stack.agent.pid}
    for child in psutil.Process(stack.apiserver.pid).children(recursive=True):
        cmd = " ".join(child.cmdline())
        for name in ("controller-manager", "scheduler"):
            if f"pykubelet {name}" in cmd:
                pids[name] = child.pid
    return {k: v for k, v in pids.items() if v}


async def bench(stack: Stack, replicas: int, rounds: int) -> dict:
    assert stack.images and stack.containerd
    image = stack.images.busybox_pinned
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    cri = await CRIClient.connect(stack.containerd.endpoint)
    await cri.pull_image(image)
    await cri.close()
    try:
        await client.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
    except ApiError as err:
        if not err.conflict:
            raise
    procs = component_pids(stack)
    report: dict = {"replicas": replicas, "rounds": [], "components": sorted(procs)}
    for r in range(rounds):
        floor = await floor_round(client, replicas, stack.node_name, image, f"r{r}")
        await delete_everything(client)
        deploy = await deployment_round(client, stack.kubeconfig, replicas, image, procs)
        await delete_everything(client)
        entry = {
            "floor": floor,
            "deployment": deploy,
            "ratio": round(deploy["seconds"] / floor["seconds"], 2),
        }
        report["rounds"].append(entry)
        print(f"round {r}: {json.dumps(entry)}", flush=True)
    floors = [e["floor"]["seconds"] for e in report["rounds"]]
    deploys = [e["deployment"]["seconds"] for e in report["rounds"]]
    await client.close()
    return summarize(report, floors, deploys)


def summarize(report: dict, floors: list[float], deploys: list[float]) -> dict:
    report["floor_seconds_median"] = round(statistics.median(floors), 3)
    report["deployment_seconds_median"] = round(statistics.median(deploys), 3)
    report["ratio_of_medians"] = round(
        report["deployment_seconds_median"] / report["floor_seconds_median"], 2
    )
    report["goal"] = "deployment <= 1.3 x floor"
    return report


def svg_plot(report: dict) -> str:
    bars = []
    for i, e in enumerate(report["rounds"]):
        bars += [
            (f"r{i} floor", e["floor"]["seconds"]),
            (f"r{i} deployment", e["deployment"]["seconds"]),
            (f"r{i} status", e["deployment"]["status_available_seconds"]),
        ]
    top = max(v for _, v in bars) or 1
    width, height, bw = 60 + 50 * len(bars), 240, 34
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 100}" font-family="sans-serif" font-size="10">',
        f'<text x="10" y="14" font-size="12">{report["replicas"]} replicas to Ready (s): pre-bound pods vs kubectl apply of a Deployment</text>',
    ]
    for i, (label, v) in enumerate(bars):
        h = v / top * height
        x = 40 + i * 50
        color = "#999" if "floor" in label else ("#2a6ebb" if "deployment" in label else "#7fa8d8")
        out.append(f'<rect x="{x}" y="{20 + height - h:.1f}" width="{bw}" height="{h:.1f}" fill="{color}"/>')
        out.append(f'<text x="{x}" y="{16 + height - h:.1f}">{v:.2f}</text>')
        out.append(f'<text transform="translate({x + 10},{height + 26}) rotate(60)">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


def markdown(report: dict) -> str:
    lines = [
        f"# Deployment of {report['replicas']} replicas vs {report['replicas']} pre-bound pods",
        "",
        "| round | floor s | deployment s | ratio | status available s | kubectl apply s | store writes floor | store writes deployment | Deployment changes | ReplicaSet changes | controller-manager CPU s | API server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, e in enumerate(report["rounds"]):
        f, d = e["floor"], e["deployment"]
        cpu = d["cpu_seconds"]
        lines.append(
            f"| {i} | {f['seconds']} | {d['seconds']} | {e['ratio']} | {d['status_available_seconds']} | "
            f"{d['kubectl_apply_seconds']} | {f['store_writes']} | {d['store_writes']} | {d['deployment_changes']} | "
            f"{d['replicaset_changes']} | {cpu.get('controller-manager', '-')} | {cpu.get('apiserver', '-')} |"
        )
    lines += [
        "",
        f"Median floor {report['floor_seconds_median']} s, median deployment {report['deployment_seconds_median']} s: "
        f"ratio {report['ratio_of_medians']} (goal: at most 1.3).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    replicas, rounds = (10, 1) if args.smoke else (args.replicas, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, replicas, rounds), tag="d")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-deployment", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
