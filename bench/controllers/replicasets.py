"""The controller manager's cost: many ReplicaSets at once, and a large idle cluster (issue 12 (b), (c)).

  python bench/controllers/replicasets.py [--replicasets 1000] [--deployments 1000] [--idle-seconds 60]
  python bench/controllers/replicasets.py --smoke --out DIR      # 20 objects, 3 s idle: seconds

One API server, one run:
  1. floor: this process creates N pods itself (32 at a time): how fast the API server takes N pods.
  2. N one-replica ReplicaSets created at once with `pykubelet controller-manager --controllers
     replicaset` running: time from the first create until all N pods exist, and the controller
     manager's CPU seconds per 1 000 pods created.
  3. N Deployments of one replica each, all settled (their ReplicaSets and pods exist), then the whole
     controller manager left alone for --idle-seconds: its CPU (goal < 1 % of a core) and RSS (goal
     < 200 MiB).
Writes controllers-replicasets.{json,md,svg}. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer

NAME = "controllers-replicasets"


@dataclass(frozen=True)
class Size:
    replicasets: int = 1000
    deployments: int = 1000
    idle_seconds: float = 60.0
    concurrency: int = 32


SMOKE = Size(replicasets=20, deployments=20, idle_seconds=3.0)
TEMPLATE = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "x"}},
        "spec": TEMPLATE["spec"],
    }


def replicaset(name: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": TEMPLATE["spec"]},
        },
    }


def deployment(name: str) -> dict:
    body = replicaset(name)
    return {**body, "kind": "Deployment"}


async def create_all(client: KubeClient, path: str, bodies: list[dict], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(body: dict) -> None:
        async with gate:
            await client.create(path, body)

    await asyncio.gather(*(one(b) for b in bodies))


async def count(client: KubeClient, path: str) -> int:
    items, _ = await client.list(path)
    return len(items)


async def until_count(client: KubeClient, path: str, n: int, timeout: float = 900) -> float:
    """Seconds until the collection holds n objects (listed every 100 ms: the bench's own cost is on
    the API server, not the controller manager being measured)."""
    start = time.monotonic()
    while await count(client, path) < n:
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{path}: fewer than {n} after {timeout:.0f} s")
        await asyncio.sleep(0.1)
    return time.monotonic() - start


async def until_settled(client: KubeClient, path: str, n: int, timeout: float = 900) -> None:
    """Until every Deployment's status has caught up with it (observedGeneration, one updated replica):
    the controllers' last writes are done and what follows is idle."""
    start = time.monotonic()
    while True:
        items, _ = await client.list(path)
        done = sum(
            1
            for d in items
            if (d.get("status") or {}).get("observedGeneration") == d["metadata"].get("generation")
            and (d.get("status") or {}).get("updatedReplicas") == 1
        )
        if done >= n:
            return
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{path}: {done}/{n} settled after {timeout:.0f} s")
        await asyncio.sleep(0.5)


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def start_manager(kubeconfig: Path, controllers: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "pykubelet",
        "controller-manager",
        "--kubeconfig",
        str(kubeconfig),
        "--controllers",
        controllers,
        "--secure-port",
        "0",
        "--leader-elect=false",
    ]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


async def synced(log: Path, timeout: float = 60) -> None:
    """Until the manager logs that its informers have listed (it then runs its workers)."""
    deadline = time.monotonic() + timeout
    while "caches synced" not in (log.read_text(errors="replace") if log.exists() else ""):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"controller manager not running after {timeout:.0f} s:\n{log.read_text()[-2000:]}"
            )
        await asyncio.sleep(0.05)


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def run(size: Size, work: Path) -> dict:
    out: dict = {
        "replicasets": size.replicasets,
        "deployments": size.deployments,
        "idle_seconds": size.idle_seconds,
    }
    with ApiServer(work / "api") as server:
        client = KubeClient(load_kubeconfig(server.kubeconfig), qps=0)
        try:
            for ns in ("floor", "rs", "idle"):
                await client.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            start = time.monotonic()
            await create_all(
                client,
                "/api/v1/namespaces/floor/pods",
                [pod(f"p{i}") for i in range(size.replicasets)],
                size.concurrency,
            )
            out["floor_pods_s"] = round(time.monotonic() - start, 2)

            manager = start_manager(server.kubeconfig, "replicaset", work / "cm-rs.log")
            proc = psutil.Process(manager.pid)
            try:
                await synced(work / "cm-rs.log")
                cpu0 = cpu_seconds(proc)
                start = time.monotonic()
                creating = asyncio.create_task(
                    create_all(
                        client,
                        "/apis/apps/v1/namespaces/rs/replicasets",
                        [replicaset(f"rs{i}") for i in range(size.replicasets)],
                        size.concurrency,
                    )
                )
                await until_count(client, "/api/v1/namespaces/rs/pods", size.replicasets)
                await creating
                out["replicasets_pods_s"] = round(time.monotonic() - start, 2)
                cpu = cpu_seconds(proc) - cpu0
                out["cm_cpu_s_per_1000_pods"] = round(cpu * 1000 / size.replicasets, 2)
            finally:
                stop(manager)

            manager = start_manager(server.kubeconfig, "*", work / "cm-all.log")
            proc = psutil.Process(manager.pid)
            try:
                await create_all(
                    client,
                    "/apis/apps/v1/namespaces/idle/deployments",
                    [deployment(f"d{i}") for i in range(size.deployments)],
                    size.concurrency,
                )
                await until_count(client, "/api/v1/namespaces/idle/pods", size.deployments)
                await until_settled(client, "/apis/apps/v1/namespaces/idle/deployments", size.deployments)
                cpu0, t0 = cpu_seconds(proc), time.monotonic()
                await asyncio.sleep(size.idle_seconds)
                out["idle_cpu_pct"] = round(100 * (cpu_seconds(proc) - cpu0) / (time.monotonic() - t0), 2)
                out["idle_rss_mib"] = round(proc.memory_info().rss / 2**20, 1)
            finally:
                stop(manager)
        finally:
            await client.close()
    out["ratio_to_floor"] = (
        round(out["replicasets_pods_s"] / out["floor_pods_s"], 2) if out["floor_pods_s"] else None
    )
    out["load_average"] = round(os.getloadavg()[0], 1)
    out["client_qps"] = "20 (burst 30), kube-controller-manager's defaults"
    return out


def markdown(r: dict) -> str:
    return "\n".join(
        [
            f"# Controller manager: {r['replicasets']} ReplicaSets at once, {r['deployments']} idle Deployments",
            "",
            "| figure | value | goal |",
            "| --- | --- | --- |",
            f"| floor: {r['replicasets']} pods created by the bench | {r['floor_pods_s']} s | |",
            f"| {r['replicasets']} one-replica ReplicaSets until every pod exists | {r['replicasets_pods_s']} s "
            f"({r['ratio_to_floor']}x the floor) | |",
            f"| controller manager CPU per 1 000 pods created | {r['cm_cpu_s_per_1000_pods']} s | |",
            f"| idle controller manager with {r['deployments']} Deployments, CPU | {r['idle_cpu_pct']} % of a core | < 1 % |",
            f"| idle controller manager RSS | {r['idle_rss_mib']} MiB | < 200 MiB |",
            "",
            f"The controller manager runs with its client-side limit at {r['client_qps']}: each pod is a create and a",
            "status write, so the rate limit, not the loop, bounds step 2 at this size, as it does upstream.",
            "",
            f"Load average while running: {r['load_average']} (2 cores; other work on the machine slows every figure).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--replicasets", type=int, default=Size.replicasets)
    parser.add_argument("--deployments", type=int, default=Size.deployments)
    parser.add_argument("--idle-seconds", type=float, default=Size.idle_seconds)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    size = SMOKE if args.smoke else Size(args.replicasets, args.deployments, args.idle_seconds)
    with tempfile.TemporaryDirectory(prefix="bench-cm-") as tmp:
        report = asyncio.run(run(size, Path(tmp)))
    text = markdown(report)
    print(text)
    bars = [
        ("floor: pods by the bench (s)", report["floor_pods_s"]),
        ("pods through ReplicaSets (s)", report["replicasets_pods_s"]),
        ("CM CPU per 1000 pods (s)", report["cm_cpu_s_per_1000_pods"]),
    ]
    write_report(out, NAME, report, text, bar_svg("controller manager", bars, "s"))


if __name__ == "__main__":
    main()
