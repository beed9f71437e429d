"""A Job of N completions, P at a time, from `kubectl create -f` to Complete, against the floor of the same
N pods the bench runs itself, P at a time, pre-bound to the node, in the same run (issue 18; goal: at most
1.3x the floor).

  python bench/controllers/jobs.py [--completions 100] [--parallelism 10] [--rounds 1] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor: the bench creates P pods with the Job's pod template and spec.nodeName set, and one more each
         time a watch sees one Succeeded, until N have succeeded;
  job:   `kubectl create -f` of a Job with that template, completions N and parallelism P (the Job
         controller creates the pods with its tracking finalizer, the scheduler binds them, the controller
         counts them through uncountedTerminatedPods); time until the Job's Complete condition, and until
         a pod watch saw N Succeeded. Also counted: store writes (pods, bindings, statuses, finalizer
         removals, Job status, events) and the CPU of the controller manager and the API server.
Floor and Job alternate; between them everything is deleted and gone. Figures are reported, never
asserted. `--smoke`: 10 completions, 3 at a time, 1 round.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from bench.agent.startup import ProcWatch
from bench.controllers.deployment import Watcher, component_pids, revision
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-jobs"
NAME = "work"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["true"]}
        ],
    }


def job(completions: int, parallelism: int, image: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {"spec": pod_spec(image)},
        },
    }


def succeeded(pods: Watcher) -> int:
    return sum(1 for p in pods.objects.values() if (p.get("status") or {}).get("phase") == "Succeeded")


async def floor_round(client: KubeClient, n: int, p: int, node: str, image: str, tag: str) -> dict:
    path = f"/api/v1/namespaces/{NS}/pods"
    rv = (await client.get(path))["metadata"]["resourceVersion"]
    made = 0
    wake = asyncio.Event()
    pods = Watcher(client, path, rv, wake.set)
    await asyncio.sleep(0.2)
    before = await revision(client)
    t0 = time.monotonic()

    async def create(count: int) -> None:
        nonlocal made
        names = [f"floor-{tag}-{made + i}" for i in range(count)]
        made += count
        await asyncio.gather(
            *(
                client.create(
                    path,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name},
                        "spec": {**pod_spec(image), "nodeName": node},
                    },
                )
                for name in names
            )
        )

    await create(min(p, n))
    while succeeded(pods) < n:
        await asyncio.wait_for(wake.wait(), 600)
        wake.clear()
        running = made - succeeded(pods)
        if made < n and running < p:
            await create(min(p - running, n - made))
    seconds = time.monotonic() - t0
    pods.stop()
    return {"seconds": round(seconds, 3), "store_writes": await revision(client) - before}


async def job_round(
    client: KubeClient, kubeconfig: Path, n: int, p: int, image: str, procs: dict[str, int]
) -> dict:
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-job-")[1])
    manifest.write_text(json.dumps(job(n, p, image)))
    pods_path, jobs_path = f"/api/v1/namespaces/{NS}/pods", f"/apis/batch/v1/namespaces/{NS}/jobs"
    rv = (await client.get(pods_path))["metadata"]["resourceVersion"]
    wake = asyncio.Event()
    pods = Watcher(client, pods_path, rv, wake.set)
    jobs = Watcher(client, jobs_path, rv, wake.set)
    watches = {name: ProcWatch(pid) for name, pid in procs.items()}
    await asyncio.sleep(0.2)
    before = await revision(client)
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "create",
        "-f",
        str(manifest),
        stdout=asyncio.subprocess.DEVNULL,
    )
    if await proc.wait() != 0:
        raise RuntimeError("kubectl create failed")
    pods_done: float | None = None
    while True:
        if pods_done is None and succeeded(pods) >= n:
            pods_done = time.monotonic() - t0
        conditions = ((jobs.objects.get(NAME) or {}).get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
            break
        await asyncio.wait_for(wake.wait(), 600)
        wake.clear()
    seconds = time.monotonic() - t0
    await asyncio.sleep(3)  # what the controllers still do after the fact is counted too
    pods.stop()
    jobs.stop()
    manifest.unlink()
    return {
        "seconds": round(seconds, 3),
        "pods_succeeded_seconds": round(pods_done or seconds, 3),
        "store_writes": await revision(client) - before,
        "job_changes": jobs.added + jobs.modified,
        "cpu_seconds": {name: w.result()["cpu_seconds"] for name, w in watches.items()},
    }


async def delete_everything(client: KubeClient) -> None:
    jobs_path, pods_path = f"/apis/batch/v1/namespaces/{NS}/jobs", f"/api/v1/namespaces/{NS}/pods"
    for item in (await client.get(jobs_path))["items"]:
        try:
            await client.delete(
                f"{jobs_path}/{item['metadata']['name']}", {"propagationPolicy": "Background"}
            )
        except ApiError as err:
            if not err.not_found:
                raise
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = (await client.get(pods_path))["items"]
        if not pods and not (await client.get(jobs_path))["items"]:
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
    raise RuntimeError("pods not removed within 180 s")


async def bench(stack: Stack, completions: int, parallelism: int, rounds: int) -> dict:
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
    procs = {k: v for k, v in component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    report: dict = {"completions": completions, "parallelism": parallelism, "rounds": []}
    for r in range(rounds):
        floor = await floor_round(client, completions, parallelism, stack.node_name, image, f"r{r}")
        await delete_everything(client)
        ran = await job_round(client, stack.kubeconfig, completions, parallelism, image, procs)
        await delete_everything(client)
        entry = {"floor": floor, "job": ran, "ratio": round(ran["seconds"] / floor["seconds"], 2)}
        report["rounds"].append(entry)
        print(f"round {r}: {json.dumps(entry)}", flush=True)
    await client.close()
    floors = [e["floor"]["seconds"] for e in report["rounds"]]
    jobs = [e["job"]["seconds"] for e in report["rounds"]]
    report["floor_seconds_median"] = round(statistics.median(floors), 3)
    report["job_seconds_median"] = round(statistics.median(jobs), 3)
    report["ratio_of_medians"] = round(report["job_seconds_median"] / report["floor_seconds_median"], 2)
    report["goal"] = "job <= 1.3 x floor"
    return report


def svg_plot(report: dict) -> str:
    bars = []
    for i, e in enumerate(report["rounds"]):
        bars += [(f"r{i} floor", e["floor"]["seconds"]), (f"r{i} job", e["job"]["seconds"])]
    top = max(v for _, v in bars) or 1
    width, height, bw = 60 + 60 * len(bars), 240, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 90}" font-family="sans-serif" font-size="10">',
        f'<text x="10" y="14" font-size="12">{report["completions"]} completions, {report["parallelism"]} at a time (s): '
        "the bench's own pods vs a Job</text>",
    ]
    for i, (label, v) in enumerate(bars):
        h = v / top * height
        x = 40 + i * 60
        out.append(
            f'<rect x="{x}" y="{20 + height - h:.1f}" width="{bw}" height="{h:.1f}" '
            f'fill="{"#999" if "floor" in label else "#2a6ebb"}"/>'
        )
        out.append(f'<text x="{x}" y="{16 + height - h:.1f}">{v:.2f}</text>')
        out.append(f'<text transform="translate({x + 10},{height + 26}) rotate(60)">{label}</text>')
    out.append("</svg>")
    return "\n".join(out)


def markdown(report: dict) -> str:
    lines = [
        f"# A Job of {report['completions']} completions, {report['parallelism']} at a time, vs the same pods run by "
        "the bench",
        "",
        "| round | floor s | job s | ratio | job pods succeeded s | store writes floor | store writes job | "
        "Job changes | controller-manager CPU s | API server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, e in enumerate(report["rounds"]):
        f, j = e["floor"], e["job"]
        cpu = j["cpu_seconds"]
        lines.append(
            f"| {i} | {f['seconds']} | {j['seconds']} | {e['ratio']} | {j['pods_succeeded_seconds']} | "
            f"{f['store_writes']} | {j['store_writes']} | {j['job_changes']} | "
            f"{cpu.get('controller-manager', '-')} | {cpu.get('apiserver', '-')} |"
        )
    lines += [
        "",
        f"Median floor {report['floor_seconds_median']} s, median Job {report['job_seconds_median']} s: "
        f"ratio {report['ratio_of_medians']} (goal: at most 1.3).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    completions, parallelism, rounds = (
        (10, 3, 1) if args.smoke else (args.completions, args.parallelism, args.rounds)
    )
    report = run_on_stack(lambda stack: bench(stack, completions, parallelism, rounds), tag="j")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-jobs", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
