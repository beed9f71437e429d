"""A DaemonSet rollout on N nodes of one machine, from `kubectl create -f` to one Ready pod on every node,
against the floor of the same N pods the bench creates itself, one per node with spec.nodeName set, in
the same run (issue 18; goal: at most 1.3x the floor).

  python bench/controllers/daemonset.py [--nodes 3] [--rounds 3] [--smoke] [--out DIR]

One multi-node stack (`pykubelet up --nodes N`'s: each node its own containerd and agent, joined by TLS
bootstrap, pod CIDRs from the node IPAM). The image is pulled on every node first. Each round:
  floor:     the bench creates N pods with the DaemonSet's pod template, each bound to one node;
  daemonset: `kubectl create -f` of the DaemonSet (the controller creates one pod per node with its
             node affinity, the scheduler binds each, the controller counts them in its status); time
             until a pod watch saw N Ready pods, and until the DaemonSet's status says numberReady = N.
Also counted: store writes and the CPU of the controller manager and the API server. Floor and
DaemonSet alternate; between them everything is deleted and gone. Figures are reported, never asserted.
`--smoke`: 2 nodes, 1 round.
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
from bench.controllers.deployment import Watcher, component_pids, is_ready, revision
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-daemonset"
NAME = "every"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "exec sleep 3600"],
            }
        ],
    }


def daemonset(image: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": pod_spec(image)},
        },
    }


def ready_count(pods: Watcher) -> int:
    return sum(1 for p in pods.objects.values() if is_ready(p))


async def floor_round(client: KubeClient, nodes: list[str], image: str, tag: str) -> dict:
    path = f"/api/v1/namespaces/{NS}/pods"
    rv = (await client.get(path))["metadata"]["resourceVersion"]
    wake = asyncio.Event()
    pods = Watcher(client, path, rv, wake.set)
    await asyncio.sleep(0.2)
    before = await revision(client)
    t0 = time.monotonic()
    await asyncio.gather(
        *(
            client.create(
                path,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"floor-{tag}-{i}", "labels": {"app": NAME}},
                    "spec": {**pod_spec(image), "nodeName": node},
                },
            )
            for i, node in enumerate(nodes)
        )
    )
    while ready_count(pods) < len(nodes):
        await asyncio.wait_for(wake.wait(), 600)
        wake.clear()
    seconds = time.monotonic() - t0
    pods.stop()
    return {"seconds": round(seconds, 3), "store_writes": await revision(client) - before}


async def daemonset_round(
    client: KubeClient, kubeconfig: Path, nodes: list[str], image: str, procs: dict[str, int]
) -> dict:
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-ds-")[1])
    manifest.write_text(json.dumps(daemonset(image)))
    pods_path, ds_path = f"/api/v1/namespaces/{NS}/pods", f"/apis/apps/v1/namespaces/{NS}/daemonsets"
    rv = (await client.get(pods_path))["metadata"]["resourceVersion"]
    wake = asyncio.Event()
    pods = Watcher(client, pods_path, rv, wake.set)
    sets = Watcher(client, ds_path, rv, wake.set)
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
    pods_ready: float | None = None
    n = len(nodes)
    while True:
        if pods_ready is None and ready_count(pods) >= n:
            pods_ready = time.monotonic() - t0
        status = (sets.objects.get(NAME) or {}).get("status") or {}
        if (
            pods_ready is not None
            and status.get("numberReady") == n
            and status.get("desiredNumberScheduled") == n
        ):
            break
        await asyncio.wait_for(wake.wait(), 600)
        wake.clear()
    status_seconds = time.monotonic() - t0
    placed = sorted((p.get("spec") or {}).get("nodeName", "") for p in pods.objects.values())
    await asyncio.sleep(3)  # what the controllers still do after the fact is counted too
    pods.stop()
    sets.stop()
    manifest.unlink()
    if placed != sorted(nodes):
        raise RuntimeError(f"the DaemonSet's pods are on {placed}, not one on each of {nodes}")
    return {
        "seconds": round(pods_ready or status_seconds, 3),
        "status_seconds": round(status_seconds, 3),
        "store_writes": await revision(client) - before,
        "daemonset_changes": sets.added + sets.modified,
        "cpu_seconds": {name: w.result()["cpu_seconds"] for name, w in watches.items()},
    }


async def delete_everything(client: KubeClient) -> None:
    ds_path, pods_path = f"/apis/apps/v1/namespaces/{NS}/daemonsets", f"/api/v1/namespaces/{NS}/pods"
    for item in (await client.get(ds_path))["items"]:
        try:
            await client.delete(f"{ds_path}/{item['metadata']['name']}", {"propagationPolicy": "Background"})
        except ApiError as err:
            if not err.not_found:
                raise
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = (await client.get(pods_path))["items"]
        if not pods and not (await client.get(ds_path))["items"]:
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


async def pull_everywhere(stack: Stack, image: str) -> None:
    assert stack.containerd is not None
    for endpoint in (stack.containerd.endpoint, *(n.containerd.endpoint for n in stack.extra_nodes)):
        cri = await CRIClient.connect(endpoint)
        try:
            await cri.pull_image(image)
        finally:
            await cri.close()


async def bench(stack: Stack, rounds: int) -> dict:
    assert stack.images
    image = stack.images.busybox_pinned
    await pull_everywhere(stack, image)
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    try:
        await client.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
    except ApiError as err:
        if not err.conflict:
            raise
    nodes = stack.node_names
    procs = {k: v for k, v in component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    report: dict = {"nodes": len(nodes), "rounds": []}
    for r in range(rounds):
        floor = await floor_round(client, nodes, image, f"r{r}")
        await delete_everything(client)
        ran = await daemonset_round(client, stack.kubeconfig, nodes, image, procs)
        await delete_everything(client)
        entry = {"floor": floor, "daemonset": ran, "ratio": round(ran["seconds"] / floor["seconds"], 2)}
        report["rounds"].append(entry)
        print(f"round {r}: {json.dumps(entry)}", flush=True)
    await client.close()
    floors = [e["floor"]["seconds"] for e in report["rounds"]]
    sets = [e["daemonset"]["seconds"] for e in report["rounds"]]
    report["floor_seconds_median"] = round(statistics.median(floors), 3)
    report["daemonset_seconds_median"] = round(statistics.median(sets), 3)
    report["ratio_of_medians"] = round(report["daemonset_seconds_median"] / report["floor_seconds_median"], 2)
    report["goal"] = "daemonset <= 1.3 x floor"
    return report


def svg_plot(report: dict) -> str:
    bars = []
    for i, e in enumerate(report["rounds"]):
        bars += [(f"r{i} floor", e["floor"]["seconds"]), (f"r{i} daemonset", e["daemonset"]["seconds"])]
    top = max(v for _, v in bars) or 1
    width, height, bw = 60 + 60 * len(bars), 240, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 90}" font-family="sans-serif" font-size="10">',
        f'<text x="10" y="14" font-size="12">one pod on each of {report["nodes"]} nodes (s): '
        "the bench's own pods vs a DaemonSet</text>",
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
        f"# A DaemonSet on {report['nodes']} nodes of one machine vs the same pods created by the bench",
        "",
        "| round | floor s | daemonset s (pods Ready) | ratio | status numberReady s | store writes floor | "
        "store writes daemonset | DaemonSet changes | controller-manager CPU s | API server CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, e in enumerate(report["rounds"]):
        f, d = e["floor"], e["daemonset"]
        cpu = d["cpu_seconds"]
        lines.append(
            f"| {i} | {f['seconds']} | {d['seconds']} | {e['ratio']} | {d['status_seconds']} | "
            f"{f['store_writes']} | {d['store_writes']} | {d['daemonset_changes']} | "
            f"{cpu.get('controller-manager', '-')} | {cpu.get('apiserver', '-')} |"
        )
    lines += [
        "",
        f"Median floor {report['floor_seconds_median']} s, median DaemonSet {report['daemonset_seconds_median']} s: "
        f"ratio {report['ratio_of_medians']} (goal: at most 1.3).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    nodes, rounds = (2, 1) if args.smoke else (args.nodes, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, rounds), tag="d", node_name="bn", nodes=nodes)
    text = markdown(report)
    print(text)
    write_report(out, "controllers-daemonset", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
