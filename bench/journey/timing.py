"""trace and diagnose of a 100-replica Deployment, each under 2 s against our API server (issue 21).

  python bench/journey/timing.py [--replicas 100] [--rounds 5]
  python bench/journey/timing.py --smoke --out DIR      # 10 replicas, 2 rounds: seconds

Against an API server alone (no agent, no scheduler, no controllers): running 100 real pods through the
whole stack under the host lock costs a minute of the machine for nothing trace reads differently, so
this process writes what those components would, each under its own field manager: the Deployment as
kubectl-client-side-apply, its ReplicaSet and the pods as kube-controller-manager, the binding as
kube-scheduler, each pod's status (PodScheduled, Initialized, ContainersReady, Ready, a running
container) as kubelet, a Service and its EndpointSlice, and the events each of them records (Scheduled,
Pulled, Created, Started, SuccessfulCreate, ScalingReplicaSet). Then it times, as a user runs them:
  - `pykubelet trace deployment/web` and `pykubelet diagnose deployment/web` as subprocesses (wall time,
    interpreter start included), and
  - the same reads and the timeline / the verdict in this process (the part that grows with replicas).
Writes journey.{json,md,svg}. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from journey.diagnose import diagnose
from journey.diagnose_cli import gather_facts
from journey.kinds import BY_KIND
from journey.trace_cli import trace_steps
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.auditlog import audit_args

NAME = "journey"
NS = "bench"
ROOT = Path(__file__).resolve().parents[2]
LABELS = {"app": "web"}


@dataclass(frozen=True)
class Size:
    replicas: int = 100
    rounds: int = 5


SMOKE = Size(replicas=10, rounds=2)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event(obj: dict, reason: str, component: str, message: str) -> dict:
    m = obj["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{m['name']}."},
        "involvedObject": {
            "kind": obj["kind"],
            "name": m["name"],
            "uid": m["uid"],
            "namespace": NS,
            "apiVersion": obj["apiVersion"],
        },
        "reason": reason,
        "message": message,
        "type": "Normal",
        "source": {"component": component},
        "firstTimestamp": now(),
        "lastTimestamp": now(),
        "count": 1,
    }


async def post(client: KubeClient, path: str, body: dict, manager: str) -> dict:
    return await client.create(path, body, fieldManager=manager)


async def write_cluster(client: KubeClient, replicas: int) -> None:
    """What kubectl, the controllers, the scheduler and a kubelet would have written."""
    await client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    await client.create(
        "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bench-node"}}
    )
    await client.patch(
        "/api/v1/nodes/bench-node/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now(),
                        "lastTransitionTime": now(),
                    }
                ]
            }
        },
        content_type="application/merge-patch+json",
        fieldManager="kubelet",
    )
    await client.create(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "bench-node"},
            "spec": {
                "holderIdentity": "bench-node",
                "leaseDurationSeconds": 40,
                "renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        },
        fieldManager="kubelet",
    )
    template = {
        "metadata": {"labels": LABELS},
        "spec": {"containers": [{"name": "main", "image": "busybox", "ports": [{"containerPort": 8080}]}]},
    }
    deploy = await post(
        client,
        BY_KIND["Deployment"].collection(NS),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS}, "template": template},
        },
        "kubectl-client-side-apply",
    )
    await post(
        client,
        BY_KIND["Service"].collection(NS),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": LABELS, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        "kubectl-client-side-apply",
    )
    rs = await post(
        client,
        BY_KIND["ReplicaSet"].collection(NS),
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-5d8f",
                "labels": LABELS,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "web",
                        "uid": deploy["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"replicas": replicas, "selector": {"matchLabels": LABELS}, "template": template},
        },
        "kube-controller-manager",
    )
    events = BY_KIND["Event"].collection(NS)
    await client.create(
        events,
        event(
            deploy,
            "ScalingReplicaSet",
            "deployment-controller",
            f"Scaled up replica set web-5d8f from 0 to {replicas}",
        ),
    )
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> dict:
        async with gate:
            pods = BY_KIND["Pod"].collection(NS)
            pod = await post(
                client,
                pods,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"web-5d8f-{i:03d}",
                        "labels": LABELS,
                        "ownerReferences": [
                            {
                                "apiVersion": "apps/v1",
                                "kind": "ReplicaSet",
                                "name": "web-5d8f",
                                "uid": rs["metadata"]["uid"],
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": template["spec"],
                },
                "kube-controller-manager",
            )
            await client.create(
                events,
                event(
                    rs, "SuccessfulCreate", "replicaset-controller", f"Created pod: {pod['metadata']['name']}"
                ),
            )
            name = pod["metadata"]["name"]
            await post(
                client,
                f"{pods}/{name}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"kind": "Node", "name": "bench-node"},
                },
                "kube-scheduler",
            )
            await client.create(
                events,
                event(
                    pod, "Scheduled", "default-scheduler", f"Successfully assigned {NS}/{name} to bench-node"
                ),
            )
            for reason, msg in (
                ("Pulled", 'Container image "busybox" already present on machine'),
                ("Created", "Created container main"),
                ("Started", "Started container main"),
            ):
                await client.create(events, event(pod, reason, "kubelet", msg))
            stamp = now()
            conds = [
                {"type": t, "status": "True", "lastTransitionTime": stamp}
                for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
            ]
            return await client.patch(
                f"{pods}/{name}/status",
                {
                    "status": {
                        "phase": "Running",
                        "podIP": f"10.9.{i // 250}.{i % 250 + 1}",
                        "conditions": conds,
                        "containerStatuses": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "imageID": "",
                                "ready": True,
                                "started": True,
                                "restartCount": 0,
                                "state": {"running": {"startedAt": stamp}},
                            }
                        ],
                    }
                },
                content_type="application/strategic-merge-patch+json",
                fieldManager="kubelet",
            )

    pods = await asyncio.gather(*(one(i) for i in range(replicas)))
    await post(
        client,
        BY_KIND["EndpointSlice"].collection(NS),
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "addressType": "IPv4",
            "metadata": {
                "name": "web-x1",
                "labels": {
                    "kubernetes.io/service-name": "web",
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                },
            },
            "ports": [{"port": 8080, "protocol": "TCP", "name": ""}],
            "endpoints": [
                {
                    "addresses": [p["status"]["podIP"]],
                    "conditions": {"ready": True},
                    "targetRef": {
                        "kind": "Pod",
                        "name": p["metadata"]["name"],
                        "namespace": NS,
                        "uid": p["metadata"]["uid"],
                    },
                }
                for p in pods
            ],
        },
        "kube-controller-manager",
    )
    status = {
        "observedGeneration": 1,
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }
    await client.patch(
        f"{BY_KIND['ReplicaSet'].collection(NS)}/web-5d8f/status",
        {"status": status},
        content_type="application/merge-patch+json",
        fieldManager="kube-controller-manager",
    )
    await client.patch(
        f"{BY_KIND['Deployment'].collection(NS)}/web/status",
        {
            "status": {
                **status,
                "updatedReplicas": replicas,
                "conditions": [
                    {
                        "type": "Available",
                        "status": "True",
                        "reason": "MinimumReplicasAvailable",
                        "lastTransitionTime": now(),
                        "lastUpdateTime": now(),
                        "message": "Deployment has minimum availability.",
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
        fieldManager="kube-controller-manager",
    )


def cli(
    kubeconfig: Path | None, *args: str, namespace: str = NS, as_json: bool = True
) -> tuple[float, subprocess.CompletedProcess]:
    """`pykubelet ARGS --kubeconfig K -n NS [--json]` as a user runs it: its wall time and its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    extra = ["--kubeconfig", str(kubeconfig), "-n", namespace] if kubeconfig else []
    if kubeconfig and as_json:
        extra.append("--json")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pykubelet.cli", *args, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return time.perf_counter() - start, done


async def in_process(
    kubeconfig: Path, namespace: str = NS, log: Path | None = None
) -> tuple[float, float, int, str]:
    """trace's and diagnose's reads and their timeline / verdict in this process (with the audit log
    `log`, as the CLI reads it beside the stack's kubeconfig): their seconds, the steps, the verdict."""
    deployment = BY_KIND["Deployment"]
    async with KubeClient(load_kubeconfig(kubeconfig), component="bench") as client:
        start = time.perf_counter()
        steps = await trace_steps(client, deployment, "web", namespace, log)
        t_trace = time.perf_counter() - start
        start = time.perf_counter()
        verdict = diagnose(await gather_facts(client, deployment, "web", namespace, log))
        t_diag = time.perf_counter() - start
    return t_trace, t_diag, len(steps), verdict.status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=Size.replicas)
    parser.add_argument("--rounds", type=int, default=Size.rounds)
    parser.add_argument(
        "--audit-log",
        action="store_true",
        help="the server writes the stack's audit log beside its kubeconfig, so trace and diagnose read it",
    )
    add_run_options(parser)
    args = parser.parse_args()
    size = SMOKE if args.smoke else Size(args.replicas, args.rounds)
    out = out_dir(parser, args)
    with (
        tempfile.TemporaryDirectory(prefix="bench-journey-") as tmp,
        ApiServer(
            Path(tmp) / "api", extra_args=audit_args(Path(tmp) / "api") if args.audit_log else []
        ) as server,
    ):
        kubeconfig = server.kubeconfig

        async def setup() -> None:
            async with KubeClient(load_kubeconfig(kubeconfig), component="bench") as client:
                await write_cluster(client, size.replicas)

        start = time.perf_counter()
        asyncio.run(setup())
        setup_s = time.perf_counter() - start
        figures: dict[str, list[float]] = {
            "baseline_version_cli": [],
            "trace_cli": [],
            "diagnose_cli": [],
            "trace_inproc": [],
            "diagnose_inproc": [],
        }
        steps, status, exit_code = 0, "", -1
        for _ in range(size.rounds):
            figures["baseline_version_cli"].append(cli(None, "version")[0])
            t, done = cli(kubeconfig, "trace", "deployment/web")
            if done.returncode != 0:
                raise SystemExit(f"trace failed: {done.stderr}")
            steps = len(json.loads(done.stdout)["steps"])
            figures["trace_cli"].append(t)
            t, done = cli(kubeconfig, "diagnose", "deployment/web")
            exit_code = done.returncode
            status = json.loads(done.stdout)["summary"]
            figures["diagnose_cli"].append(t)
            tt, td, _, _ = asyncio.run(in_process(kubeconfig))
            figures["trace_inproc"].append(tt)
            figures["diagnose_inproc"].append(td)
    median = {k: statistics.median(v) for k, v in figures.items()}
    data = {
        "replicas": size.replicas,
        "rounds": size.rounds,
        "audit_log": args.audit_log,
        "setup_s": setup_s,
        "steps": steps,
        "diagnose_status": status,
        "diagnose_exit": exit_code,
        "median_s": median,
        "all_s": figures,
        "goal_s": 2.0,
        "target": "our API server alone, objects written by the bench as the components would",
    }
    md = [
        f"# trace and diagnose of a {size.replicas}-replica Deployment",
        "",
        "Against our API server alone; this bench wrote what kubectl, the controllers, the scheduler and a "
        "kubelet would have (see the script's docstring). Median of "
        f"{size.rounds} rounds; goal < 2 s each. `*_cli` are subprocesses as a user runs them (interpreter "
        "start and imports included: the baseline is `pykubelet version`); `*_inproc` the reads and the "
        "timeline / verdict alone.",
        "",
        "| what | median (s) |",
        "| --- | --- |",
        *(f"| {k} | {v:.3f} |" for k, v in median.items()),
        "",
        f"trace printed {steps} steps; diagnose said `{status}` (exit {exit_code}).",
    ]
    svg = bar_svg(f"trace / diagnose, {size.replicas} replicas", [(k, v) for k, v in median.items()], "s")
    write_report(out, NAME, data, "\n".join(md), svg)
    print(json.dumps({"median_s": median, "steps": steps, "status": status}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
