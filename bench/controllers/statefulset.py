"""An OrderedReady StatefulSet of N replicas, from `kubectl create -f` to N Ready, against the floor of the
same N pods the bench makes itself in the same order (each one once the one before is Ready), pre-bound to
the node, in the same run (issue 18; goal: at most 1.3x the floor).

  python bench/controllers/statefulset.py [--replicas 20] [--rounds 1] [--smoke] [--out DIR]

One stack (registry, containerd, API server with scheduler and controller manager, agent). Each round:
  floor: the bench creates pod `floor-<r>-0` with the set's pod template, spec.nodeName, hostname and
         subdomain, and the next one each time a watch sees the newest Ready, until N are Ready;
  set:   `kubectl create -f` of a StatefulSet with that template and N replicas (the controller creates
         web-0, waits for it to be Running and Ready, then web-1, ...; the scheduler binds each); time
         until a pod watch saw N Ready, and until the set's status said readyReplicas N. Also counted:
         store writes and the CPU of the controller manager and the API server.
Floor and set alternate; between them everything is deleted and gone. Figures are reported, never
asserted. `--smoke`: 3 replicas, 1 round.
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

NS = "bench-statefulset"
NAME = "web"
Obj = dict[str, Any]


def pod_spec(image: str) -> Obj:
    return {
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sleep", "3600"]}
        ],
    }


def statefulset(replicas: int, image: str) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "serviceName": NAME,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"metadata": {"labels": {"app": NAME}}, "spec": pod_spec(image)},
        },
    }


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class Phases:
    """When a pod watch first showed each pod created, bound to the node, and Ready."""

    def __init__(self) -> None:
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.pods: Watcher | None = None

    def seen(self) -> None:
        now = time.monotonic()
        for name, pod in (self.pods.objects if self.pods else {}).items():
            self.created.setdefault(name, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
            if is_ready(pod):
                self.ready.setdefault(name, now)

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


def ready_count(pods: Watcher) -> int:
    return sum(1 for p in pods.objects.values() if is_ready(p) and not p["metadata"].get("deletionTimestamp"))


async def floor_round(client: KubeClient, n: int, node: str, image: str, tag: str) -> dict:
    path = f"/api/v1/namespaces/{NS}/pods"
    rv = (await client.get(path))["metadata"]["resourceVersion"]
    wake = asyncio.Event()
    phases = Phases()

    def woken() -> None:
        phases.seen()
        wake.set()

    pods = phases.pods = Watcher(client, path, rv, woken)
    await asyncio.sleep(0.2)
    before = await revision(client)
    t0 = time.monotonic()
    for ordinal in range(n):
        name = f"floor-{tag}-{ordinal}"
        spec = {**pod_spec(image), "nodeName": node, "hostname": name, "subdomain": NAME}
        await client.create(
            path,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "floor"}},
                "spec": spec,
            },
        )
        while not is_ready(pods.objects.get(name) or {}):
            await asyncio.wait_for(wake.wait(), 600)
            wake.clear()
    seconds = time.monotonic() - t0
    pods.stop()
    return {
        "seconds": round(seconds, 3),
        "store_writes": await revision(client) - before,
        "per_pod": phases.medians([f"floor-{tag}-{i}" for i in range(n)]),
    }


async def set_round(client: KubeClient, kubeconfig: Path, n: int, image: str, procs: dict[str, int]) -> dict:
    manifest = Path(tempfile.mkstemp(suffix=".json", prefix="bench-sts-")[1])
    manifest.write_text(json.dumps(statefulset(n, image)))
    pods_path, sets_path = f"/api/v1/namespaces/{NS}/pods", f"/apis/apps/v1/namespaces/{NS}/statefulsets"
    rv = (await client.get(pods_path))["metadata"]["resourceVersion"]
    wake = asyncio.Event()
    phases = Phases()

    def woken() -> None:
        phases.seen()
        wake.set()

    pods = phases.pods = Watcher(client, pods_path, rv, woken)
    sets = Watcher(client, sets_path, rv, wake.set)
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
    while True:
        if pods_ready is None and ready_count(pods) >= n:
            pods_ready = time.monotonic() - t0
        status = (sets.objects.get(NAME) or {}).get("status") or {}
        if pods_ready is not None and status.get("readyReplicas", 0) >= n:
            break
        await asyncio.wait_for(wake.wait(), 600)
        wake.clear()
    status_seconds = time.monotonic() - t0
    await asyncio.sleep(3)  # what the controllers still do after the fact is counted too
    pods.stop()
    sets.stop()
    manifest.unlink()
    return {
        "seconds": round(pods_ready or status_seconds, 3),
        "status_seconds": round(status_seconds, 3),
        "store_writes": await revision(client) - before,
        "set_changes": sets.added + sets.modified,
        "per_pod": phases.medians([f"{NAME}-{i}" for i in range(n)]),
        "cpu_seconds": {name: w.result()["cpu_seconds"] for name, w in watches.items()},
    }


async def delete_everything(client: KubeClient) -> None:
    sets_path, pods_path = f"/apis/apps/v1/namespaces/{NS}/statefulsets", f"/api/v1/namespaces/{NS}/pods"
    revisions_path = f"/apis/apps/v1/namespaces/{NS}/controllerrevisions"
    for item in (await client.get(sets_path))["items"]:
        try:
            await client.delete(
                f"{sets_path}/{item['metadata']['name']}", {"propagationPolicy": "Background"}
            )
        except ApiError as err:
            if not err.not_found:
                raise
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = (await client.get(pods_path))["items"]
        if not pods and not (await client.get(sets_path))["items"]:
            if not (await client.get(revisions_path))["items"]:
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
    procs = {k: v for k, v in component_pids(stack).items() if k in ("apiserver", "controller-manager")}
    report: dict = {"replicas": replicas, "rounds": []}
    for r in range(rounds):
        floor = await floor_round(client, replicas, stack.node_name, image, f"r{r}")
        await delete_everything(client)
        ran = await set_round(client, stack.kubeconfig, replicas, image, procs)
        await delete_everything(client)
        entry = {"floor": floor, "statefulset": ran, "ratio": round(ran["seconds"] / floor["seconds"], 2)}
        report["rounds"].append(entry)
        print(f"round {r}: {json.dumps(entry)}", flush=True)
    await client.close()
    floors = [e["floor"]["seconds"] for e in report["rounds"]]
    sets = [e["statefulset"]["seconds"] for e in report["rounds"]]
    report["floor_seconds_median"] = round(statistics.median(floors), 3)
    report["statefulset_seconds_median"] = round(statistics.median(sets), 3)
    report["ratio_of_medians"] = round(
        report["statefulset_seconds_median"] / report["floor_seconds_median"], 2
    )
    report["goal"] = "statefulset <= 1.3 x floor"
    return report


def svg_plot(report: dict) -> str:
    bars = []
    for i, e in enumerate(report["rounds"]):
        bars += [(f"r{i} floor", e["floor"]["seconds"]), (f"r{i} set", e["statefulset"]["seconds"])]
    top = max(v for _, v in bars) or 1
    width, height, bw = 60 + 60 * len(bars), 240, 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 90}" font-family="sans-serif" '
        'font-size="10">',
        f'<text x="10" y="14" font-size="12">{report["replicas"]} pods in order (s): the bench\'s own pods vs an '
        "OrderedReady StatefulSet</text>",
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
        f"# An OrderedReady StatefulSet of {report['replicas']} vs the same pods made in order by the bench",
        "",
        "| round | floor s | set s (pods Ready) | ratio | set status s | store writes floor | store writes set | "
        "set changes | controller-manager CPU s | API server CPU s | per pod floor: ready->next, bound->ready | "
        "per pod set: ready->next, created->bound, bound->ready |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, e in enumerate(report["rounds"]):
        f, s = e["floor"], e["statefulset"]
        cpu = s["cpu_seconds"]
        lines.append(
            f"| {i} | {f['seconds']} | {s['seconds']} | {e['ratio']} | {s['status_seconds']} | "
            f"{f['store_writes']} | {s['store_writes']} | {s['set_changes']} | "
            f"{cpu.get('controller-manager', '-')} | {cpu.get('apiserver', '-')} | "
            f"{f['per_pod']['ready_to_next_created']}, {f['per_pod']['bound_to_ready']} | "
            f"{s['per_pod']['ready_to_next_created']}, {s['per_pod']['created_to_bound']}, "
            f"{s['per_pod']['bound_to_ready']} |"
        )
    lines += [
        "",
        f"Median floor {report['floor_seconds_median']} s, median StatefulSet {report['statefulset_seconds_median']} s: "
        f"ratio {report['ratio_of_medians']} (goal: at most 1.3).",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    replicas, rounds = (3, 1) if args.smoke else (args.replicas, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, replicas, rounds), tag="s")
    text = markdown(report)
    print(text)
    write_report(out, "controllers-statefulset", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
