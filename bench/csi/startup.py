"""Pods each with a CSI volume of their own against the same pods with an emptyDir, from creation to all
Ready, in the same run (issue 35; goal: the CSI pods within 1.5x the emptyDir pods).

  python bench/csi/startup.py [--pods 50] [--rounds 3] [--smoke] [--out DIR]

One stack with the bundled host-path CSI driver and its sidecars (what `pykubelet up` runs; the class
csi-hostpath, WaitForFirstConsumer). The image is pulled first. Each round:
  floor: N pods, each mounting an emptyDir;
  csi:   N claims of csi-hostpath and N pods, each mounting its own claim: the scheduler picks the node,
         the provisioner beside the driver calls CreateVolume and writes the PV, the PV controller binds,
         the agent stages and publishes the volume before the pod's sandbox starts.
Time until a pod watch saw all N Ready. Also counted: store writes, the CPU of the agent (and its CPU
per mount: the agent's CPU of the csi phase less the floor's, over N), the controller manager, the API
server and the driver's sidecars. Floor and CSI alternate; between them pods, claims and volumes are
deleted and gone. Figures are reported, never asserted. `--smoke`: 3 pods, 1 round.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.controllers import workload as wl
from bench.reporting import add_run_options, out_dir, write_report
from kubeclient.client import KubeClient
from pykubelet.rig.csi import CLASS
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

NS = "bench-csi"
PODS, CLAIMS = f"/api/v1/namespaces/{NS}/pods", f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
Obj = dict[str, Any]


def pod(name: str, image: str, volume: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "csi-bench"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "exec sleep 3600"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", **volume}],
        },
    }


def claim(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "16Mi"}},
            "storageClassName": CLASS,
        },
    }


def ready_count(w: wl.Window) -> int:
    return sum(1 for p in w.watch["pods"].objects.values() if wl.is_ready(p))


async def floor_round(client: KubeClient, n: int, image: str, tag: str, procs: dict[str, int]) -> Obj:
    w, phases = wl.watched(client, {"pods": PODS}, procs)
    async with w:
        await asyncio.gather(
            *(client.create(PODS, pod(f"empty-{tag}-{i}", image, {"emptyDir": {}})) for i in range(n))
        )
        seconds = await w.until(lambda: ready_count(w) >= n)
        return {"seconds": round(seconds, 3), "last": phases.last(w.t0), **await w.costs(settle=2)}


async def csi_round(
    client: KubeClient, kubeconfig: Path, n: int, image: str, tag: str, procs: dict[str, int]
) -> Obj:
    w, phases = wl.watched(client, {"pods": PODS}, procs)
    async with w:
        names = [f"csi-{tag}-{i}" for i in range(n)]
        await asyncio.gather(*(client.create(CLAIMS, claim(name)) for name in names))
        await asyncio.gather(
            *(
                client.create(PODS, pod(name, image, {"persistentVolumeClaim": {"claimName": name}}))
                for name in names
            )
        )
        seconds = await w.until(lambda: ready_count(w) >= n)
        costs = await w.costs(settle=2)
    dry_run = pod("dry-run", image, {"persistentVolumeClaim": {"claimName": names[0]}})
    dry_run["metadata"]["namespace"] = NS
    return {
        "seconds": round(seconds, 3),
        "last": phases.last(w.t0),
        "kubectl_seconds": await wl.kubectl_seconds(kubeconfig, dry_run),
        **costs,
    }


async def cleanup(client: KubeClient) -> None:
    """Pods and claims gone, then the provisioned volumes (DeleteVolume by the provisioner)."""
    await wl.delete_everything(client, NS, ["v1/persistentvolumeclaims"])
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        volumes = (await client.get("/api/v1/persistentvolumes"))["items"]
        if not any(((v.get("spec") or {}).get("claimRef") or {}).get("namespace") == NS for v in volumes):
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the bench's volumes are still there after 180 s")


async def bench(stack: Stack, n: int, rounds: int) -> Obj:
    client, image = await wl.prepare(stack, NS)
    assert stack.csi is not None and stack.csi.sidecars is not None
    procs = {
        k: v for k, v in wl.component_pids(stack).items() if k in ("apiserver", "controller-manager", "agent")
    }
    procs["csi-sidecars"] = stack.csi.sidecars.pid or 0
    csi_rounds = itertools.count()
    try:
        report = await wl.alternate(
            rounds,
            "csi",
            lambda r: floor_round(client, n, image, f"r{r}", procs),
            lambda _via: csi_round(client, stack.kubeconfig, n, image, f"r{next(csi_rounds)}", procs),
            lambda: cleanup(client),
            vias=("client",),  # no controller object to apply: the pods are the bench's on both sides
        )
    finally:
        await client.close()
    report["goal"] = "csi <= 1.5 x floor"
    agent = [
        (e["csi"]["cpu_seconds"].get("agent", 0.0) - e["floor"]["cpu_seconds"].get("agent", 0.0)) / n
        for e in report["rounds"]
    ]
    report["agent_cpu_ms_per_mount"] = round(1000 * sorted(agent)[len(agent) // 2], 1)
    return {"pods": n, **report}


def svg_plot(report: Obj) -> str:
    title = f"{report['pods']} pods Ready (s): emptyDir (floor) vs a CSI volume each"
    return wl.bars_svg(title, wl.round_bars(report, "csi"))


def markdown(report: Obj) -> str:
    title = f"{report['pods']} pods each with its own CSI volume vs with an emptyDir"
    columns: list[wl.Column] = [
        ("last created/bound floor s", lambda f, _c: f"{f['last']['created']}/{f['last']['bound']}"),
        ("last created/bound csi s", lambda _f, c: f"{c['last']['created']}/{c['last']['bound']}"),
        ("agent CPU floor s", lambda f, _c: f["cpu_seconds"].get("agent", "-")),
        ("agent CPU csi s", lambda _f, c: c["cpu_seconds"].get("agent", "-")),
        ("sidecars CPU s", lambda _f, c: c["cpu_seconds"].get("csi-sidecars", "-")),
    ]
    text = wl.report_markdown(report, title, "csi", "CSI", columns).replace("at most 1.3", "at most 1.5")
    per_mount = report["agent_cpu_ms_per_mount"]
    return text + f"\nAgent CPU per CSI mount (median, csi phase less floor, over the pods): {per_mount} ms\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    n, rounds = (3, 1) if args.smoke else (args.pods, args.rounds)
    report = run_on_stack(lambda stack: bench(stack, n, rounds), tag="v", node_name="bv", csi_driver=True)
    text = markdown(report)
    print(text)
    write_report(out, "csi-startup", report, text, svg_plot(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
