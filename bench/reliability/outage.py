"""API outage benchmark (issue 31): how long after every API server returns the node's truth is in the
API, with 110 pods on the node. Figures are reported, never asserted.

  python bench/reliability/outage.py [--pods 110] [--out DIR]      # root: a whole stack
  python bench/reliability/outage.py --smoke --out DIR             # 3 pods: about 40 s (the stack's start)

A stack (`pykubelet up`'s, the node's real agent on containerd) runs N busybox pods. Then the API server
(with its scheduler and controller manager, its process group) is stopped with SIGSTOP, as a hung
control plane looks to a node; every pod's container is stopped through CRI behind the agent's back,
and the agent restarts each one from what it already has (restartPolicy Always, no back-off on a first
restart). Once every pod runs its new container the API server gets SIGCONT, and from that moment the
API is polled (every 100 ms, a LIST of the pods and a GET of the Node) until it shows the node's truth:
every pod with restartCount 1, running, with the new container's ID; and the Node Ready with
a heartbeat (its Lease's renewTime) from after the outage. Reported: those two times, the outage's length, and the
agent's status writes queued meanwhile (one newest status per pod, flushed when the API is back).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.cri import CRIClient
from bench.agent.startup import NS, agent_run, delete_all, ensure_namespace
from bench.reporting import add_run_options, bar_svg, out_dir, write_report
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.onstack import run_on_stack
from pykubelet.rig.stack import Stack

POLL = 0.1
RUNNING = 1  # CRI's CONTAINER_RUNNING


def _when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def _running_containers(cri: CRIClient) -> dict[str, str]:
    """pod name -> its running container's ID, for the bench's pods."""
    out = {}
    for c in await cri.list_containers(state=RUNNING, labels={"io.kubernetes.pod.namespace": NS}):
        out[c.labels["io.kubernetes.pod.name"]] = c.id
    return out


async def _wait(what: str, check, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Poll `check` (a coroutine function) until it is true; the seconds it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(POLL)
    return time.monotonic() - started


def _signal_group(pid: int, sig: signal.Signals) -> None:
    os.killpg(os.getpgid(pid), sig)


async def bench(stack: Stack, pods: int) -> dict[str, object]:
    assert stack.images and stack.containerd and stack.apiserver and stack.apiserver.pid
    image = stack.images.busybox_pinned
    client = KubeClient(load_kubeconfig(stack.kubeconfig), qps=5000, burst=5000)
    cri = await CRIClient.connect(stack.containerd.endpoint)
    try:
        await cri.pull_image(image)
        await ensure_namespace(client)
        await agent_run(client, pods, stack.node_name, image)
        before = await _running_containers(cri)
        if len(before) != pods:
            raise SystemExit(f"{len(before)} of {pods} pods have a running container")
        apiserver = stack.apiserver.pid
        _signal_group(apiserver, signal.SIGSTOP)
        outage_started = time.monotonic()
        try:
            await asyncio.gather(*(cri.stop_container(cid, 0) for cid in before.values()))

            async def all_restarted() -> bool:
                now = await _running_containers(cri)
                return len(now) == pods and all(now[name] != cid for name, cid in before.items())

            restarted = await _wait("every container restarted without the API", all_restarted, 300)
        finally:
            _signal_group(apiserver, signal.SIGCONT)
        returned, returned_wall = time.monotonic(), time.time()
        after = await _running_containers(cri)

        async def pods_true() -> bool:
            try:
                items = (await client.get(f"/api/v1/namespaces/{NS}/pods"))["items"]
            except ApiError:
                return False
            good = 0
            for pod in items:
                statuses = (pod.get("status") or {}).get("containerStatuses") or []
                s = statuses[0] if statuses else {}
                cid = (s.get("containerID") or "").removeprefix("containerd://")
                wanted = after.get(pod["metadata"]["name"])
                good += s.get("restartCount") == 1 and "running" in (s.get("state") or {}) and cid == wanted
            return good == pods

        async def node_true() -> bool:
            # The node's heartbeat is its Lease (renewed every 10 s); the Node's status is written when it
            # changes (upstream's nodeStatusReportFrequency), so its Ready condition must still be True.
            try:
                node = await client.get(f"/api/v1/nodes/{stack.node_name}")
                lease = await client.get(
                    f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{stack.node_name}"
                )
            except ApiError:
                return False
            ready = [c for c in node["status"].get("conditions") or [] if c["type"] == "Ready"]
            renewed = _when(lease["spec"].get("renewTime") or "1970-01-01T00:00:00Z")
            return bool(ready) and ready[0]["status"] == "True" and renewed >= returned_wall

        pods_seconds = await _wait("every pod's truth in the API", pods_true, 120)
        await _wait("the node's heartbeat in the API", node_true, 120)
        node_seconds = time.monotonic() - returned  # polled after the pods', counted from the return too
        await delete_all(client)
    finally:
        await cri.close()
        await client.close()
    return {
        "pods": pods,
        "outage_seconds": round(returned - outage_started, 2),
        "agent_restarted_all_seconds": round(restarted, 2),
        "pods_true_in_api_seconds": round(pods_seconds, 2),
        "node_heartbeat_in_api_seconds": round(node_seconds, 2),
    }


def markdown(result: dict) -> str:  # type: ignore[type-arg]
    return (
        "\n".join(
            [
                f"# API outage end to the node's truth in the API, {result['pods']} pods on one node",
                "",
                f"`sudo python bench/reliability/outage.py --pods {result['pods']}` (the node's real agent on "
                f"containerd; load average {result['load_average']} on {result['cpus']} CPUs)",
                "",
                "| figure | seconds |",
                "| --- | --- |",
                f"| outage (API server SIGSTOPped; every container stopped behind the agent's back) | {result['outage_seconds']} |",
                f"| the agent restarting all {result['pods']} containers without the API | {result['agent_restarted_all_seconds']} |",
                f"| API back -> every pod's restartCount, state and container ID in the API | {result['pods_true_in_api_seconds']} |",
                f"| API back -> the node's Lease renewed (Node still Ready) in the API | {result['node_heartbeat_in_api_seconds']} |",
                "",
                "The pods' figure is the agent's queued status writes (one newest status per pod) going out "
                "once the API answers; the node's is its next Lease renewal (every 10 s, sooner after failed ones).",
            ]
        )
        + "\n"
    )


def svg(result: dict) -> str:  # type: ignore[type-arg]
    return bar_svg(
        f"After an API outage, {result['pods']} pods",
        [
            ("pods true in the API", result["pods_true_in_api_seconds"]),
            ("node heartbeat in the API", result["node_heartbeat_in_api_seconds"]),
            ("agent restarted all (outage)", result["agent_restarted_all_seconds"]),
        ],
        "s",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    pods = 3 if args.smoke else args.pods
    result = run_on_stack(lambda stack: bench(stack, pods), tag="o", node_name="outage-node")
    result.update(load_average=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count())
    text = markdown(result)
    write_report(out, "reliability-outage", result, text, svg(result))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
