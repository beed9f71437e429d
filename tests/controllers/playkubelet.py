"""The tests' stand-in for a node's kubelet, for controller tests against the real API server: what
mark_ready does for one pod, done for every pod of a namespace as it appears, plus the other half of
a graceful deletion (a bound pod being deleted is removed with gracePeriodSeconds=0, as the kubelet
does once its containers stopped). `ready(pod)` decides whether a pod becomes Ready (a readiness probe
that passes or not); `delay` is how long a pod takes to start, `stop_delay` how long it takes to stop.

`Census` follows the same namespace through a watch and records, event by event, how many pods exist
(not terminating) and how many of them are Ready: the numbers a rollout's bounds are about; and how
many different templates (pod-template-hash) had pods at once, terminating ones included.
"""

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


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


async def _start(kube: KubeClient, pod: Obj, node: str, ready: bool, delay: float) -> None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    base = f"/api/v1/namespaces/{ns}/pods/{name}"
    try:
        if not (pod.get("spec") or {}).get("nodeName"):
            await kube.create(
                f"{base}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"kind": "Node", "name": node},
                },
            )
        await asyncio.sleep(delay)
        await kube.patch(
            f"{base}/status",
            {
                "status": {
                    "phase": "Running",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True" if ready else "False",
                            "lastTransitionTime": _stamp(),
                        }
                    ],
                }
            },
        )
    except ApiError as err:
        if not (err.not_found or err.conflict):
            raise


async def _finish(kube: KubeClient, pod: Obj, delay: float) -> None:
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    await asyncio.sleep(delay)
    with contextlib.suppress(ApiError):
        await kube.delete(
            f"/api/v1/namespaces/{ns}/pods/{name}",
            {"gracePeriodSeconds": 0, "preconditions": {"uid": pod["metadata"]["uid"]}},
        )


@contextlib.asynccontextmanager
async def kubelet(
    apiserver: ApiServer,
    namespace: str,
    ready: Callable[[Obj], bool] = lambda _p: True,
    delay: float = 0.0,
    stop_delay: float = 0.0,
    node: str = "n1",
) -> AsyncIterator[None]:
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    started: set[str] = set()
    stopping: set[str] = set()
    tasks: set[asyncio.Task[None]] = set()

    def spawn(coro: Any) -> None:
        task = asyncio.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

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

    def handle(pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in stopping:
                stopping.add(uid)
                spawn(_finish(kube, pod, stop_delay))
        elif uid not in started:
            started.add(uid)
            spawn(_start(kube, pod, node, ready(pod), delay))

    runner = asyncio.create_task(loop())
    try:
        yield
    finally:
        runner.cancel()
        for task in [runner, *tasks]:
            task.cancel()
        await asyncio.gather(runner, *tasks, return_exceptions=True)
        await kube.close()


@dataclass
class Census:
    """Pods of a namespace as a watch reports them, with the extremes seen since `arm()`."""

    pods: dict[str, Obj] = field(default_factory=dict)
    existing: dict[str, str] = field(default_factory=dict)  # uid -> pod-template-hash, terminating too
    armed: bool = False
    most_templates: int = 0
    most_pods: int = 0
    least_ready: int | None = None
    samples: int = 0

    @property
    def count(self) -> int:
        return len(self.pods)

    @property
    def ready(self) -> int:
        return sum(1 for p in self.pods.values() if is_ready(p))

    def arm(self) -> None:
        self.armed = True
        self.most_pods, self.least_ready = self.count, self.ready
        self.most_templates = len(set(self.existing.values()))

    def observe(self, event: Obj) -> None:
        pod = event["object"]
        uid = pod["metadata"]["uid"]
        if event["type"] == "DELETED":
            self.existing.pop(uid, None)
        elif event["type"] in ("ADDED", "MODIFIED"):
            self.existing[uid] = (pod["metadata"].get("labels") or {}).get("pod-template-hash", "")
        if event["type"] == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            self.pods.pop(uid, None)
        elif event["type"] in ("ADDED", "MODIFIED"):
            self.pods[uid] = pod
        if self.armed:
            self.samples += 1
            self.most_templates = max(self.most_templates, len(set(self.existing.values())))
            self.most_pods = max(self.most_pods, self.count)
            self.least_ready = self.ready if self.least_ready is None else min(self.least_ready, self.ready)


@contextlib.asynccontextmanager
async def census(apiserver: ApiServer, namespace: str) -> AsyncIterator[Census]:
    kube = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    seen = Census()
    listed = asyncio.Event()

    async def loop() -> None:
        path = f"/api/v1/namespaces/{namespace}/pods"
        listing = await kube.get(path)
        for pod in listing["items"]:
            seen.observe({"type": "ADDED", "object": pod})
        rv = listing["metadata"]["resourceVersion"]
        listed.set()
        while True:
            async for event in kube.watch(
                path, {"resourceVersion": rv, "timeoutSeconds": 600, "allowWatchBookmarks": True}
            ):
                rv = event["object"]["metadata"].get("resourceVersion", rv)
                seen.observe(event)

    runner = asyncio.create_task(loop())
    await asyncio.wait_for(listed.wait(), 10)
    try:
        yield seen
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await kube.close()
