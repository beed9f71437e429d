"""The scheduler proper: watch handlers feed the cache and the queue; one loop takes a pod at a time,
decides synchronously, assumes the pod on its node, and hands the binding to a background task.

Binding is asynchronous (as upstream's binding cycle) so that a slow API call never holds up the next
decision; a semaphore caps bindings in flight, which is the back-pressure when the API server is the
bottleneck. Status patches and events are also off the decision path.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.algorithm import FitError, Search, schedule
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.events import scheduler_events
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import ClusterView
from controlplane.scheduler.metrics import ERROR, PENDING_QUEUES, UNSCHEDULABLE, LiveState, SchedulerMetrics
from controlplane.scheduler.plugins import build_scores
from controlplane.scheduler.podinfo import PodInfo, pod_info
from controlplane.scheduler.queue import QueuedPod, SchedulingQueue
from controlplane.scheduler.volumebinding import VolumeBinding
from controlplane.scheduler.volumelimits import NodeVolumeLimits
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventcorrelator import rfc3339
from kubeclient.informer import Informer

log = logging.getLogger(__name__)

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
# Terminal pods hold no resources: upstream's scheduler does not even watch them.
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
STATS_INTERVAL = 60.0


@dataclass
class Stats:
    scheduled: int = 0
    unschedulable: int = 0
    bind_errors: int = 0


class Scheduler:
    def __init__(
        self,
        client: KubeClient,
        config: SchedulerConfig,
        rng: random.Random | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.client = client
        self.metrics = metrics or SchedulerMetrics()
        self.config = config
        self.rng = rng or random.Random()
        self.cache = SchedulerCache()
        self.queue = SchedulingQueue(config.backoff_initial, config.backoff_max, config.unschedulable_flush)
        self.filters = default_filters()
        self.scores = build_scores(config)
        self.events = scheduler_events(client, config.scheduler_name, config.event_concurrency)
        self.stats = Stats()
        self.search = Search(percentage=config.percentage_of_nodes_to_score)
        self._bind_slots = asyncio.Semaphore(config.bind_concurrency)
        self._background: set[asyncio.Task[None]] = set()
        self._binding = 0
        self.nodes = Informer(client, "/api/v1/nodes")
        self.nodes.add_handler(self._node_added, self._node_updated, self._node_deleted)
        self.pods = Informer(client, "/api/v1/pods", field_selector=POD_FIELD_SELECTOR)
        self.pods.add_handler(self._pod_added, self._pod_updated, self._pod_deleted)
        # VolumeBinding's view of claims, volumes and classes; a change may make a waiting pod fit.
        self.claims = Informer(client, "/api/v1/persistentvolumeclaims")
        self.volumes = Informer(client, "/api/v1/persistentvolumes")
        self.classes = Informer(client, "/apis/storage.k8s.io/v1/storageclasses")
        self.volume_binding = VolumeBinding(self.claims, self.volumes, self.classes)
        self.filters.append(self.volume_binding)
        # NodeVolumeLimits: the CSI drivers' allocatable counts from the nodes' CSINodes.
        self.csinodes = Informer(client, "/apis/storage.k8s.io/v1/csinodes")
        self.filters.append(NodeVolumeLimits(self.claims, self.volumes, self.classes, self.csinodes))
        for informer in (self.claims, self.volumes, self.classes, self.csinodes):
            informer.add_handler(
                lambda _o: self._volumes_changed(),
                lambda _o, _n: self._volumes_changed(),
                lambda _o: self._volumes_changed(),
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set; then finish in-flight bindings and flush events."""
        self.events.start()
        informers = [
            asyncio.create_task(self.nodes.run(), name="watch-nodes"),
            asyncio.create_task(self.pods.run(), name="watch-pods"),
            *(
                asyncio.create_task(i.run(), name=f"watch-{i.path}")
                for i in (self.claims, self.volumes, self.classes, self.csinodes)
            ),
        ]
        loop_task: asyncio.Task[None] | None = None
        stopper = asyncio.create_task(stop.wait())
        try:
            # Decide nothing before both caches are filled, or the first pods would see no nodes.
            synced = asyncio.gather(
                *(
                    i.synced.wait()
                    for i in (self.nodes, self.pods, self.claims, self.volumes, self.classes, self.csinodes)
                )
            )
            await asyncio.wait([synced, stopper, *informers], return_when=asyncio.FIRST_COMPLETED)
            if not stop.is_set():
                for t in informers:
                    if t.done():
                        t.result()  # an informer died: surface its error
                log.info("caches synced nodes=%d pods=%d", len(self.nodes.store), len(self.pods.store))
                loop_task = asyncio.create_task(self._loop(), name="schedule-loop")
                informers.append(asyncio.create_task(self._report(), name="stats"))
                await asyncio.wait([loop_task, stopper, *informers], return_when=asyncio.FIRST_COMPLETED)
                for t in (loop_task, *informers):
                    if t.done() and not t.cancelled():
                        t.result()
            synced.cancel()
        finally:
            for t in (loop_task, stopper, *informers):
                if t is not None:
                    t.cancel()
            await asyncio.gather(
                *(t for t in (loop_task, stopper, *informers) if t is not None), return_exceptions=True
            )
            if self._background:
                await asyncio.wait(self._background, timeout=10)
            for t in self._background:
                t.cancel()
            await self.events.stop()

    async def _report(self, every: float = STATS_INTERVAL) -> None:
        """One log line a minute, only when something happened: what an operator of `pykubelet up` looks
        for first when pods stay Pending."""
        last = None
        while True:
            await asyncio.sleep(every)
            counts = self.queue.counts()
            now = (
                self.stats.scheduled,
                self.stats.unschedulable,
                self.stats.bind_errors,
                tuple(counts.values()),
            )
            if now != last:
                log.info(
                    "stats scheduled=%d unschedulable_attempts=%d bind_errors=%d nodes=%d queue=%s",
                    self.stats.scheduled,
                    self.stats.unschedulable,
                    self.stats.bind_errors,
                    len(self.cache.nodes()),
                    ",".join(f"{k}:{v}" for k, v in counts.items()),
                )
                last = now

    # the decision loop --------------------------------------------------------------------------------
    async def _loop(self) -> None:
        while True:
            qp = await self.queue.pop()
            await self._bind_slots.acquire()
            handed_off = False  # True once a bind task owns the slot
            started = time.monotonic()
            try:
                handed_off = self.schedule_one(qp, started)
            except Exception:
                log.exception("scheduling failed pod=%s", qp.info.key)
                self.metrics.attempt(ERROR, self.config.scheduler_name, time.monotonic() - started)
                self.queue.retry_after_error(qp)
            finally:
                if not handed_off:
                    self._bind_slots.release()
            await asyncio.sleep(0)  # let watches and bindings run between decisions

    def schedule_one(self, qp: QueuedPod, started: float | None = None) -> bool:
        """Decide for one popped pod; True if a bind task was started (it then owns the bind slot)."""
        started = time.monotonic() if started is None else started
        qp.initial_attempt = qp.initial_attempt or started
        pod = qp.info
        if not self.queue.owns(qp):
            return False  # deleted while it waited for a bind slot
        if self.cache.has_pod(pod.uid):
            self.queue.done(pod.uid)  # bound by someone else meanwhile
            return False
        nodes = self.cache.nodes()
        decided = time.monotonic()
        try:
            node = schedule(
                pod,
                nodes,
                self.filters,
                self.scores,
                ClusterView(len(nodes), self.cache.image_nodes),
                self.rng,
                self.search,
            )
        except FitError as err:
            self.metrics.algorithm_duration.observe(time.monotonic() - decided)
            self.volume_binding.forget(pod.uid)
            self._failed(qp, str(err))
            self.metrics.attempt(UNSCHEDULABLE, self.config.scheduler_name, time.monotonic() - started)
            return False
        self.metrics.algorithm_duration.observe(time.monotonic() - decided)
        self.cache.assume(pod, node.name)
        self.queue.done(pod.uid)
        self._spawn(self._bind(qp, node.name, started), hold_slot=True)
        return True

    def live_state(self) -> LiveState:
        counts = self.queue.counts()
        return LiveState({q: counts.get(q, 0) for q in PENDING_QUEUES}, self.cache.sizes(), self._binding)

    async def _bind(self, qp: QueuedPod, node: str, started: float) -> None:
        pod = qp.info
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            info = self.cache.node(node)
            labels = dict(info.facts.labels) if info is not None and info.facts is not None else {}
            await self.volume_binding.pre_bind(self.client, pod, node, labels)  # PreBind: volumes first
            await self.client.create(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding", body)
        except Exception as err:  # any failure: forget the assumption, retry later
            self.cache.forget(pod.uid)
            self.stats.bind_errors += 1
            self.metrics.attempt(ERROR, self.config.scheduler_name, time.monotonic() - started)
            # The slot it held is free again, and pods may have been refused for want of it (upstream
            # moves its unschedulable pods on a binding failure for the same reason).
            self.queue.move_all()
            status = err.status if isinstance(err, ApiError) else 0
            if status == 404 or (status == 409 and self.cache.has_pod(pod.uid)):
                # Gone, or already bound elsewhere and seen so: the pod watch has told the rest.
                log.info("binding refused pod=%s node=%s status=%d", pod.key, node, status)
                return
            # Anything else (including a 409 the watch has not explained yet) is retried after backoff;
            # if the pod turns out to be bound or deleted meanwhile, the watch takes it off the queue.
            log.warning("binding failed pod=%s node=%s error=%s", pod.key, node, err)
            if status != 409:
                self.events.event(
                    pod.obj, "Warning", "FailedScheduling", f"Binding rejected: {err}", action="Scheduling"
                )
            self.queue.retry_after_error(qp)
            return
        self.stats.scheduled += 1
        now = time.monotonic()
        self.metrics.scheduled(
            self.config.scheduler_name, now - started, qp.attempts, now - qp.initial_attempt
        )
        log.debug("bound pod=%s node=%s", pod.key, node)
        self.events.event(
            pod.obj,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
            action="Binding",
        )

    def _failed(self, qp: QueuedPod, message: str) -> None:
        pod = qp.info
        self.stats.unschedulable += 1
        log.info("unschedulable pod=%s attempts=%d reason=%r", pod.key, qp.attempts, message)
        self.queue.unschedulable(qp)
        self.events.event(pod.obj, "Warning", "FailedScheduling", message, action="Scheduling")
        patch = _unschedulable_patch(pod.obj, message)
        if patch is not None:
            self._spawn(self._patch_status(pod, patch))

    async def _patch_status(self, pod: PodInfo, patch: Obj) -> None:
        try:
            await self.client.patch(
                f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                patch,
                content_type=STRATEGIC_PATCH,
            )
        except ApiError as err:
            if not err.not_found:
                log.warning("status patch failed pod=%s error=%s", pod.key, err)
        except Exception as err:
            log.warning("status patch failed pod=%s error=%r", pod.key, err)

    def _spawn(self, coro: Any, hold_slot: bool = False) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        if hold_slot:
            self._binding += 1
            self.events.hold()

        def done(t: asyncio.Task[None]) -> None:
            self._background.discard(t)
            if hold_slot:
                self._bind_slots.release()
                self._binding -= 1
                if self._binding == 0:
                    self.events.release()

        task.add_done_callback(done)

    # watch handlers -----------------------------------------------------------------------------------
    def _pod_added(self, obj: Obj) -> None:
        self._pod_seen(pod_info(obj))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        self._pod_seen(pod_info(new))

    def _pod_seen(self, info: PodInfo) -> None:
        if info.node_name:
            self.queue.delete(info.uid)
            if info.phase in TERMINAL:
                if self.cache.remove_pod(info.uid):
                    self.queue.move_all()
            else:
                self.cache.set_pod(info)
            return
        if self.cache.is_assumed(info.uid):
            return  # our binding is in flight; this is an older view of the pod
        if info.scheduler_name != self.config.scheduler_name or info.deleting or info.phase in TERMINAL:
            self.queue.delete(info.uid)
            return
        self.queue.add(info)

    def _pod_deleted(self, obj: Obj) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        self.queue.delete(uid)
        if self.cache.remove_pod(uid):
            self.queue.move_all()

    def _volumes_changed(self) -> None:
        self.volume_binding.notify()
        self.queue.move_all()

    def _node_added(self, obj: Obj) -> None:
        self.cache.set_node(obj)
        self.queue.move_all()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        before, after = self.cache.set_node(new)
        if before != after:  # heartbeats change conditions only; they cannot make a pod fit
            self.queue.move_all()

    def _node_deleted(self, obj: Obj) -> None:
        self.cache.remove_node(str((obj.get("metadata") or {}).get("name") or ""))


def _unschedulable_patch(pod: Obj, message: str) -> Obj | None:
    """The strategic merge patch setting PodScheduled=False/Unschedulable, or None if already so."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if (
        current
        and current.get("status") == "False"
        and current.get("reason") == "Unschedulable"
        and current.get("message") == message
    ):
        return None
    since = current.get("lastTransitionTime") if current and current.get("status") == "False" else None
    return {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": since or rfc3339(time.time()),
                }
            ]
        }
    }
