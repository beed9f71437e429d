"""The taint eviction controller (upstream's NoExecute taint manager, pkg/controller/tainteviction):
pods on a node with a NoExecute taint they do not tolerate are deleted.

For each pod on a NoExecute-tainted node, the tolerations that match its taints decide (`plan`):
- a taint no toleration matches: delete now;
- every taint tolerated, some toleration with tolerationSeconds: delete once the shortest runs out
  (the API server gives every pod 300 s for node.kubernetes.io/not-ready and unreachable);
- tolerated forever (no tolerationSeconds): never, and a scheduled deletion is cancelled.
A taint removed (or a toleration added) in time cancels the scheduled deletion. Before deleting, the pod
gets the condition DisruptionTarget=True (reason DeletionByTaintManager), as upstream 1.32 does, so
its owner can tell a disruption from a failure. Events on the pod, as upstream's: TaintManagerEviction
`Marking for deletion Pod <ns>/<name>` and `Cancelling deletion of Pod <ns>/<name>`.

The node's taints are remembered from its events (only NoExecute ones), so a pod that arrives later
(bound, or its tolerations changed) is judged against them without reading the node again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from controlplane.controllers import podstatus
from controlplane.controllers import taints as taintutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.podutil import now as utcnow
from controlplane.controllers.timedworkers import TimedWorkerQueue
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL
from kubeclient.informer import by_node_name, meta, split_key

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
NAME = "taint-eviction-controller"
RETRIES = 5
EVICTION_REASON = "TaintManagerEviction"
DISRUPTION_REASON, DISRUPTION_MESSAGE = (
    "DeletionByTaintManager",
    "Taint manager: deleting due to NoExecute taint",
)

NOW, AFTER, NEVER = "now", "after", "never"


@dataclass(frozen=True)
class Plan:
    """What to do with a pod on a node with these NoExecute taints."""

    action: str  # NOW, AFTER or NEVER
    seconds: float = 0.0


def plan(taints: list[Obj], tolerations: list[Obj]) -> Plan:
    tolerated, used = taintutil.matching_tolerations(taints, tolerations)
    if not tolerated:
        return Plan(NOW)
    seconds = taintutil.min_toleration_seconds(used)
    return Plan(NEVER) if seconds is None else Plan(AFTER, seconds)


def _tolerations(pod: Obj | None) -> list[Obj]:
    return [t for t in ((pod or {}).get("spec") or {}).get("tolerations") or [] if isinstance(t, dict)]


def _node_name(pod: Obj | None) -> str:
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def _pod_ref(key: str) -> Obj:
    namespace, name = split_key(key)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}


class TaintEvictionController(Controller):
    name = NAME
    account = "node-controller"  # upstream runs it on the node controller's account and role
    workers = 1  # every step is a cache read and a timer; nothing here waits on the API

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"node": by_node_name})
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.recorder = ctx.recorder(NAME)
        self.tainted: dict[str, list[Obj]] = {}  # node -> its NoExecute taints
        self.evictions = TimedWorkerQueue(self._evict)
        self.deletions = Counter(
            "taint_eviction_controller_pod_deletions",
            "[ALPHA] Total number of Pods deleted by TaintEvictionController since its start.",
            registry=ctx.registry,
        )
        self.pods.add_handler(
            on_add=lambda p: self._pod_changed(None, p),
            on_update=self._pod_changed,
            on_delete=lambda p: self._pod_changed(p, None),
        )
        self.nodes.add_handler(
            on_add=lambda n: self._node_changed(None, n),
            on_update=self._node_changed,
            on_delete=lambda n: self._node_changed(n, None),
        )

    # --- events --------------------------------------------------------------------------------------

    def _pod_changed(self, old: Obj | None, new: Obj | None) -> None:
        if (
            old is not None
            and new is not None
            and _tolerations(old) == _tolerations(new)
            and _node_name(old) == _node_name(new)
        ):
            return
        pod = new if new is not None else old
        assert pod is not None
        self.queue.add(f"pod/{meta(pod).get('namespace', '')}/{meta(pod).get('name', '')}/{_node_name(pod)}")

    def _node_changed(self, old: Obj | None, new: Obj | None) -> None:
        if (
            old is not None
            and new is not None
            and taintutil.no_execute(taintutil.node_taints(old))
            == taintutil.no_execute(taintutil.node_taints(new))
        ):
            return
        node = new if new is not None else old
        assert node is not None
        self.queue.add(f"node/{meta(node).get('name', '')}")

    async def sync(self, key: str) -> None:
        kind, _, rest = key.partition("/")
        if kind == "node":
            self._handle_node(rest)
        else:
            namespace, name, node = rest.split("/", 2)
            self._handle_pod(f"{namespace}/{name}", node)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await super().run(stop)
        finally:
            await self.evictions.stop()

    # --- decisions -----------------------------------------------------------------------------------

    def _handle_pod(self, key: str, node_name: str) -> None:
        pod = self.pods.get(key)
        if pod is None:
            self._cancel(key)
            return
        if _node_name(pod) != node_name or not node_name:
            return  # a later event (with the new node) handles it
        taints = self.tainted.get(node_name)
        if not taints:
            return
        self._process(key, _tolerations(pod), taints, time.time())

    def _handle_node(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            self.tainted.pop(name, None)
            return
        taints = taintutil.no_execute(taintutil.node_taints(node))
        if taints:
            self.tainted[name] = taints
        else:
            self.tainted.pop(name, None)
        pods = self.pods.by_index("node", name)
        if not taints:
            for pod in pods:
                self._cancel(f"{meta(pod).get('namespace', '')}/{meta(pod).get('name', '')}")
            return
        now = time.time()
        for pod in pods:
            self._process(
                f"{meta(pod).get('namespace', '')}/{meta(pod).get('name', '')}",
                _tolerations(pod),
                taints,
                now,
            )

    def _process(self, key: str, tolerations: list[Obj], taints: list[Obj], now: float) -> None:
        decision = plan(taints, tolerations)
        if decision.action == NOW:
            self._cancel(key)  # whatever was scheduled: it goes now
            self.evictions.add(key, now, now)
            return
        if decision.action == NEVER:
            self._cancel(key)
            return
        start, trigger = now, now + decision.seconds
        scheduled = self.evictions.get(key)
        if scheduled is not None and scheduled.timer is not None:
            start = scheduled.created_at
            if start + decision.seconds < trigger:
                return  # the deletion already scheduled comes first
            self._cancel(key)
        self.evictions.add(key, start, trigger)

    def _cancel(self, key: str) -> None:
        if self.evictions.cancel(key):
            namespace, name = split_key(key)
            self.recorder.event(
                _pod_ref(key), NORMAL, EVICTION_REASON, f"Cancelling deletion of Pod {namespace}/{name}"
            )

    # --- the eviction --------------------------------------------------------------------------------

    async def _evict(self, key: str) -> None:
        namespace, name = split_key(key)
        log.info("deleting pod controller=%s pod=%s", NAME, key)
        self.recorder.event(
            _pod_ref(key), NORMAL, EVICTION_REASON, f"Marking for deletion Pod {namespace}/{name}"
        )
        error: ApiError | None = None
        for _ in range(RETRIES):
            try:
                await self._mark_and_delete(namespace, name)
                self.deletions.inc()
                return
            except ApiError as err:
                if err.not_found:
                    return
                error = err
            await asyncio.sleep(0.01)
        log.warning("pod not deleted controller=%s pod=%s error=%s", NAME, key, error)

    async def _mark_and_delete(self, namespace: str, name: str) -> None:
        path = podstatus.pod_path(namespace, name)
        pod = await self.client.get(path)
        status = dict(pod.get("status") or {})
        status["conditions"] = [dict(c) for c in status.get("conditions") or []]
        target = podstatus.disruption_target(DISRUPTION_REASON, DISRUPTION_MESSAGE)
        stamp = utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
        if podstatus.update_pod_condition(status, target, stamp):
            cond = next(c for c in status["conditions"] if c.get("type") == podstatus.DISRUPTION_TARGET)
            await podstatus.patch_pod_status(self.client, pod, {"conditions": [cond]})
        await self.client.delete(path)
