"""The tests' stand-in for a kubelet running a Job's pods: every pod of the namespace is bound and run,
then ends as `outcome(pod)` says (Succeeded, Failed, Failed:<exit code>, or None: keeps running, Ready); a pod being
deleted ends Failed (unless it already ended) and is removed with gracePeriodSeconds=0, as the kubelet
does once its containers stopped. The most pods seen running at once is recorded (parallelism)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.errors import ApiError
from pykubelet.rig.apiserver import ApiServer

Obj = dict[str, Any]


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ended(phase: str, code: int) -> Obj:
    """A pod status as a kubelet writes it once the pod's one container `c` has exited with `code`."""
    terminated = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": _stamp(),
        "finishedAt": _stamp(),
    }
    return {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": _stamp()}],
        "containerStatuses": [
            {
                "name": "c",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }


@dataclass
class Kubelet:
    running: set[str] = field(default_factory=set)
    most_running: int = 0
    seen: dict[str, Obj] = field(default_factory=dict)  # uid -> the pod as it was created


@contextlib.asynccontextmanager
async def job_kubelet(
    apiserver: ApiServer, namespace: str, outcome: Callable[[Obj], str | None], run_for: float = 0.2
) -> AsyncIterator[Kubelet]:
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    state = Kubelet()
    handled: set[str] = set()
    stopping: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Any) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def base(pod: Obj) -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}"

    async def run(pod: Obj) -> None:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        with contextlib.suppress(ApiError):
            await kube.create(
                f"{base(pod)}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"kind": "Node", "name": "n1"},
                },
            )
            state.running.add(uid)
            state.most_running = max(state.most_running, len(state.running))
            await kube.patch(
                f"{base(pod)}/status",
                {
                    "metadata": {"uid": uid},
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _stamp()}],
                    },
                },
            )
            await asyncio.sleep(run_for)
            end = outcome(pod)
            if end is None or uid in stopping:
                return
            state.running.discard(uid)
            phase, _, code = end.partition(":")  # "Failed:42" ends with exit code 42
            await kube.patch(
                f"{base(pod)}/status",
                {
                    "metadata": {"uid": uid},
                    "status": ended(phase, 0 if phase == "Succeeded" else int(code or 1)),
                },
            )

    async def stop(pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        state.running.discard(uid)
        with contextlib.suppress(ApiError):
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                await kube.patch(
                    f"{base(pod)}/status", {"metadata": {"uid": uid}, "status": ended("Failed", 137)}
                )
            await kube.delete(base(pod), {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def handle(pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        state.seen.setdefault(uid, pod)  # as first seen
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in stopping:
                stopping.add(uid)
                spawn(stop(pod))
        elif uid not in handled:
            handled.add(uid)
            spawn(run(pod))

    async def loop() -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        listing = await kube.get(path)
        rv = listing["metadata"]["resourceVersion"]
        for pod in listing["items"]:
            handle(pod)
        while True:
            async for event in kube.watch(
                path, {"resourceVersion": rv, "timeoutSeconds": 600, "allowWatchBookmarks": True}
            ):
                rv = event["object"]["metadata"].get("resourceVersion", rv)
                if event["type"] in ("ADDED", "MODIFIED"):
                    handle(event["object"])

    runner = asyncio.create_task(loop())
    try:
        yield state
    finally:
        for task in [runner, *tasks]:
            task.cancel()
        await asyncio.gather(runner, *tasks, return_exceptions=True)
        await kube.close()
