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

from controlplane.scheduler import hints, storagecapacity
from controlplane.scheduler.algorithm import FitError, Search, schedule
from controlplane.scheduler.cache import SchedulerCache
from controlplane.scheduler.config import SchedulerConfig
from controlplane.scheduler.cyclemetrics import SAMPLE_EVERY, CycleMetrics
from controlplane.scheduler.events import scheduler_events
from controlplane.scheduler.filters import default_filters
from controlplane.scheduler.framework import (
    ERROR_STATUS,
    SUCCESS,
    UNSCHEDULABLE_STATUS,
    ClusterView,
    Observer,
)
from controlplane.scheduler.metrics import ERROR, PENDING_QUEUES, UNSCHEDULABLE, LiveState, SchedulerMetrics
from controlplane.scheduler.plugins import build_scores
from controlplane.scheduler.podinfo import PodInfo, pod_info, rebound
from controlplane.scheduler.preemption import preempt
from controlplane.scheduler.queue import QueuedPod, SchedulingQueue
from controlplane.scheduler.spreadselectors import SpreadSelectors
from controlplane.scheduler.victims import budgets, evict
from controlplane.scheduler.volumebinding import PodGone, VolumeBinding
from controlplane.scheduler.volumelimits import NodeVolumeLimits
from controlplane.scheduler.volumerestrictions import VolumeRestrictions
from controlplane.scheduler.volumezone import VolumeZone
from kubeclient.client import STRATEGIC_PATCH, KubeClient
from kubeclient.errors import ApiError
from kubeclient.eventcorrelator import rfc3339
from kubeclient.events import EventRecorder
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
        # One process serves every profile: pods choose theirs by spec.schedulerName, and each profile
        # has its own scores and its own event source (upstream's per-profile recorder).
        self.profiles = {p.scheduler_name: build_scores(p) for p in config.all_profiles()}
        # A profile's own percentageOfNodesToScore, else the top-level one (upstream's rule).
        self.percentages = {
            p.scheduler_name: config.percentage_of_nodes_to_score
            if p.percentage_of_nodes_to_score is None
            else p.percentage_of_nodes_to_score
            for p in config.all_profiles()
        }
        self.recorders = {
            name: scheduler_events(client, name, config.event_concurrency) for name in self.profiles
        }
        self.scores = self.profiles[config.scheduler_name]
        self.events = self.recorders[config.scheduler_name]
        self.stats = Stats()
        self.search = Search(percentage=config.percentage_of_nodes_to_score)
        self._bind_slots = asyncio.Semaphore(config.bind_concurrency)
        self._background: set[asyncio.Task[None]] = set()
        self._binding = 0
        self._cycles = 0
        self.nodes = Informer(client, "/api/v1/nodes")
        self.nodes.add_handler(self._node_added, self._node_updated, self._node_deleted)
        self.pods = Informer(client, "/api/v1/pods", field_selector=POD_FIELD_SELECTOR)
        self.pods.add_handler(self._pod_added, self._pod_updated, self._pod_deleted)
        # VolumeBinding's view of claims, volumes and classes; a change may make a waiting pod fit.
        self.claims = Informer(client, "/api/v1/persistentvolumeclaims")
        self.volumes = Informer(client, "/api/v1/persistentvolumes")
        self.classes = Informer(client, "/apis/storage.k8s.io/v1/storageclasses")
        # Storage capacity: CSIDrivers that opt in, and the capacities their provisioners publish.
        self.drivers = Informer(client, "/apis/storage.k8s.io/v1/csidrivers")
        self.capacities = Informer(client, "/apis/storage.k8s.io/v1/csistoragecapacities")
        self.volume_binding = VolumeBinding(
            self.claims, self.volumes, self.classes, self.drivers, self.capacities
        )
        # NodeVolumeLimits: the CSI drivers' allocatable counts from the nodes' CSINodes.
        self.csinodes = Informer(client, "/apis/storage.k8s.io/v1/csinodes")
        self.volume_limits = NodeVolumeLimits(self.claims, self.volumes, self.classes, self.csinodes)
        # Upstream's order: VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone.
        self.filters = default_filters(
            VolumeRestrictions(self.claims),
            self.volume_limits,
            self.volume_binding,
            VolumeZone(self.claims, self.volumes, self.classes),
        )
        # Namespace labels (affinity terms' namespaceSelector) and the Services and controllers whose
        # selectors PodTopologySpread's default constraints spread by.
        self.namespaces = Informer(client, "/api/v1/namespaces")
        self.budgets = Informer(client, "/apis/policy/v1/poddisruptionbudgets")
        # Preemption's nominations: node -> pods waiting for the room freed there, and back.
        self.nominated: dict[str, dict[str, PodInfo]] = {}
        self._nominated_node: dict[str, str] = {}
        self.spread_selectors = SpreadSelectors(client)
        self._watched = (
            self.nodes,
            self.pods,
            self.claims,
            self.volumes,
            self.classes,
            self.csinodes,
            self.drivers,
            self.capacities,
            self.namespaces,
            self.budgets,
            *self.spread_selectors.informers,
        )
        # A namespace's labels matter to affinity terms' namespaceSelector; Services and controllers
        # only to scoring, which cannot make a rejected pod fit.
        self.namespaces.add_handler(
            lambda _o: self.queue.move_all(hints.NAMESPACE),
            lambda o, n: self._namespace_changed(o, n),
            None,
        )
        # Namespace name -> labels, for every decision; made again after any namespace event.
        self._ns_labels: dict[str, dict[str, str]] | None = None
        forget = self._forget_namespace_labels
        self.namespaces.add_handler(forget, forget, forget)
        for informer in (self.claims, self.volumes, self.classes, self.csinodes):
            informer.add_handler(
                lambda _o: self._volumes_changed(),
                lambda _o, _n: self._volumes_changed(),
                lambda _o: self._volumes_changed(),
            )
        # Upstream's hints: a new capacity or a larger limit; a driver that stops tracking capacity.
        self.capacities.add_handler(lambda o: self._capacity_changed(None, o), self._capacity_changed, None)
        self.drivers.add_handler(None, self._driver_changed, None)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set; then finish in-flight bindings and flush events."""
        for recorder in self.recorders.values():
            recorder.start()
        informers = [asyncio.create_task(i.run(), name=f"watch-{i.path}") for i in self._watched]
        loop_task: asyncio.Task[None] | None = None
        stopper = asyncio.create_task(stop.wait())
        try:
            # Decide nothing before both caches are filled, or the first pods would see no nodes.
            synced = asyncio.gather(*(i.synced.wait() for i in self._watched))
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
            for recorder in self.recorders.values():
                await recorder.stop()

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
                self.metrics.attempt(ERROR, qp.info.scheduler_name, time.monotonic() - started)
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
        view = self.cluster_view()
        nodes = view.all_nodes
        self._cycles += 1
        observer = CycleMetrics(self.metrics, pod.scheduler_name, self._cycles % SAMPLE_EVERY == 1)
        self.search.percentage = self.percentages.get(
            pod.scheduler_name, self.config.percentage_of_nodes_to_score
        )
        decided = time.monotonic()
        try:
            node = schedule(
                pod,
                nodes,
                self.filters,
                self.profiles.get(pod.scheduler_name, self.scores),
                view,
                self.rng,
                self.search,
                observer,
            )
        except FitError as err:
            self.metrics.algorithm_duration.observe(time.monotonic() - decided)
            self.volume_binding.forget(pod.uid)
            nominate = self._post_filter(pod, err, view, observer) if err.num_nodes else None
            self._failed(qp, str(err), nominate, err.plugins)
            self.metrics.attempt(UNSCHEDULABLE, pod.scheduler_name, time.monotonic() - started)
            return False
        self.metrics.algorithm_duration.observe(time.monotonic() - decided)
        self.cache.assume(pod, node.name)
        self.queue.done(pod.uid)
        self._spawn(self._bind(qp, node.name, started, observer), hold_slot=True)
        return True

    def cluster_view(self) -> ClusterView:
        return self.cache.cluster_view(
            namespace_labels=self._namespace_labels(),
            default_selector=self.spread_selectors.selector,
            nominated={node: list(pods.values()) for node, pods in self.nominated.items() if pods},
        )

    def _post_filter(self, pod: PodInfo, err: FitError, view: ClusterView, observer: Observer) -> str | None:
        """DefaultPreemption: evict what frees a node for the pod and nominate that node (its name is
        returned), or say why not in the message ("" returned: any old nomination is cleared)."""
        begun = time.perf_counter()
        outcome = preempt(pod, err.reasons, self.filters, view, budgets(self.budgets.store.values()))
        took = time.perf_counter() - begun
        status = UNSCHEDULABLE_STATUS if outcome.candidate is None else SUCCESS
        if observer.sampled:
            observer.plugin("DefaultPreemption", "PostFilter", status, took)
        observer.point("PostFilter", status, took)
        self.metrics.preemption(len(outcome.candidate.victims) if outcome.candidate else None)
        if outcome.candidate is None:
            err.post_filter = f"preemption: {outcome.message}"
            self._nominate(pod, "")
            return "" if pod.nominated_node else None
        node = outcome.candidate.node.name
        log.info("preempting pod=%s node=%s victims=%d", pod.key, node, len(outcome.candidate.victims))
        self._nominate(pod, node)
        lower = [p for p in self.nominated.get(node, {}).values() if p.priority < pod.priority]
        self._spawn(evict(self.client, self.recorder(pod), pod, node, outcome.candidate.victims, lower))
        for p in lower:
            self._nominate(p, "")
        return node

    def recorder(self, pod: PodInfo) -> EventRecorder:
        """The event recorder of the pod's profile (events name it as their source)."""
        return self.recorders.get(pod.scheduler_name, self.events)

    def _nominate(self, pod: PodInfo, node: str) -> None:
        old = self._nominated_node.pop(pod.uid, None)
        if old is not None:
            self.nominated.get(old, {}).pop(pod.uid, None)
        if node:
            self._nominated_node[pod.uid] = node
            self.nominated.setdefault(node, {})[pod.uid] = pod

    def _namespace_labels(self) -> dict[str, dict[str, str]]:
        if self._ns_labels is None:
            self._ns_labels = {
                str((ns.get("metadata") or {}).get("name") or ""): (ns.get("metadata") or {}).get("labels")
                or {}
                for ns in self.namespaces.store.values()
            }
        return self._ns_labels

    def _forget_namespace_labels(self, *_objs: Obj) -> None:
        self._ns_labels = None

    def _namespace_changed(self, old: Obj, new: Obj) -> None:
        if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
            self.queue.move_all(hints.NAMESPACE)

    def live_state(self) -> LiveState:
        counts = self.queue.counts()
        return LiveState({q: counts.get(q, 0) for q in PENDING_QUEUES}, self.cache.sizes(), self._binding)

    async def _bind(self, qp: QueuedPod, node: str, started: float, observer: Observer) -> None:
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
            await timed(
                observer,
                "VolumeBinding",
                "PreBind",
                self.volume_binding.pre_bind(self.client, pod, node, labels),
            )
            path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
            await timed(observer, "DefaultBinder", "Bind", self.client.create(path, body))
        except Exception as err:  # any failure: forget the assumption, retry later
            self.cache.forget(pod.uid)
            self.stats.bind_errors += 1
            self.metrics.attempt(ERROR, qp.info.scheduler_name, time.monotonic() - started)
            # The slot it held is free again, and pods may have been refused for want of it (upstream
            # moves its unschedulable pods on a binding failure for the same reason).
            self.queue.move_all()
            status = err.status if isinstance(err, ApiError) else 0
            if status == 404 or isinstance(err, PodGone) or (status == 409 and self.cache.has_pod(pod.uid)):
                # Gone, or already bound elsewhere and seen so: the pod watch has told the rest.
                log.info("binding refused pod=%s node=%s status=%d", pod.key, node, status)
                return
            # Anything else (including a 409 the watch has not explained yet) is retried after backoff;
            # if the pod turns out to be bound or deleted meanwhile, the watch takes it off the queue.
            log.warning("binding failed pod=%s node=%s error=%s", pod.key, node, err)
            if status != 409:
                self.recorder(pod).event(
                    pod.obj, "Warning", "FailedScheduling", f"Binding rejected: {err}", action="Scheduling"
                )
            self.queue.retry_after_error(qp)
            return
        self.stats.scheduled += 1
        now = time.monotonic()
        self.metrics.scheduled(pod.scheduler_name, now - started, qp.attempts, now - qp.initial_attempt)
        log.debug("bound pod=%s node=%s", pod.key, node)
        self.recorder(pod).event(
            pod.obj,
            "Normal",
            "Scheduled",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
            action="Binding",
        )

    def _failed(
        self, qp: QueuedPod, message: str, nominate: str | None = None, plugins: frozenset[str] = frozenset()
    ) -> None:
        pod = qp.info
        self.stats.unschedulable += 1
        log.info("unschedulable pod=%s attempts=%d reason=%r", pod.key, qp.attempts, message)
        self.queue.unschedulable(qp, plugins)
        self.recorder(pod).event(pod.obj, "Warning", "FailedScheduling", message, action="Scheduling")
        patch = _unschedulable_patch(pod.obj, message, nominate)
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
            for recorder in self.recorders.values():
                recorder.hold()

        def done(t: asyncio.Task[None]) -> None:
            self._background.discard(t)
            if hold_slot:
                self._bind_slots.release()
                self._binding -= 1
                if self._binding == 0:
                    for recorder in self.recorders.values():
                        recorder.release()

        task.add_done_callback(done)

    # watch handlers -----------------------------------------------------------------------------------
    def _pod_added(self, obj: Obj) -> None:
        self._pod_seen(pod_info(obj))

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        # A pod this scheduler placed comes back bound: what the cache holds of it still holds.
        placed = self.cache.placed(str((new.get("metadata") or {}).get("uid") or ""))
        self._pod_seen((rebound(placed, new) if placed is not None else None) or pod_info(new))

    def _pod_seen(self, info: PodInfo) -> None:
        # Nominations: kept until the pod is bound or goes (our own is recorded when made, before
        # the status patch shows it; one seen in a status is taken over, e.g. after a restart).
        if info.node_name or info.deleting:
            self._nominate(info, "")
        elif info.nominated_node and info.uid not in self._nominated_node:
            self._nominate(info, info.nominated_node)
        if info.node_name:
            self.queue.delete(info.uid)
            if info.phase in TERMINAL:
                if self.cache.remove_pod(info.uid):
                    self.queue.move_all(hints.POD_REMOVED)
            else:
                # Newly placed (our own binding confirmed counts: the assumption moved nobody) or
                # relabelled: pods waiting on affinity or spread may now fit.
                old = self.cache.placed(info.uid)
                newly = old is None or self.cache.is_assumed(info.uid) or old.labels != info.labels
                self.cache.set_pod(info)
                if newly:
                    self.queue.move_all(hints.POD_PLACED)
            return
        if self.cache.is_assumed(info.uid):
            return  # our binding is in flight; this is an older view of the pod
        if info.scheduler_name not in self.profiles or info.deleting or info.phase in TERMINAL:
            self.queue.delete(info.uid)
            return
        self.queue.add(info)

    def _pod_deleted(self, obj: Obj) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        self.volume_binding.pod_deleted(uid)
        node = self._nominated_node.pop(uid, None)
        if node is not None:
            self.nominated.get(node, {}).pop(uid, None)
        self.queue.delete(uid)
        if self.cache.remove_pod(uid):
            self.queue.move_all(hints.POD_REMOVED)

    def _volumes_changed(self) -> None:
        self.volume_binding.notify()
        self.queue.move_all(hints.VOLUMES)

    def _capacity_changed(self, old: Obj | None, new: Obj) -> None:
        if storagecapacity.limit_grew(old, new):
            self.queue.move_all(hints.VOLUME_BINDING)

    def _driver_changed(self, old: Obj, new: Obj) -> None:
        if storagecapacity.capacity_disabled(old, new):
            self.queue.move_all(hints.VOLUME_BINDING)

    def _node_added(self, obj: Obj) -> None:
        self.cache.set_node(obj)
        self.queue.move_all()

    def _node_updated(self, old: Obj, new: Obj) -> None:
        before, after = self.cache.set_node(new)
        if before != after:  # heartbeats change conditions only; they cannot make a pod fit
            self.queue.move_all(hints.node_changed(before, after))

    def _node_deleted(self, obj: Obj) -> None:
        self.cache.remove_node(str((obj.get("metadata") or {}).get("name") or ""))


async def timed(observer: Observer, plugin: str, point: str, step: Any) -> None:
    """Await one bind-cycle step (the extension point's only plugin), reporting its duration and
    outcome (Success or Error) as upstream's PreBind and Bind do."""
    begun = time.perf_counter()
    status = ERROR_STATUS
    try:
        await step
        status = SUCCESS
    finally:
        took = time.perf_counter() - begun
        if observer.sampled:
            observer.plugin(plugin, point, status, took)
        observer.point(point, status, took)


def _unschedulable_patch(pod: Obj, message: str, nominate: str | None = None) -> Obj | None:
    """The strategic merge patch setting PodScheduled=False/Unschedulable (and status.nominatedNodeName
    when preemption nominated a node or cleared it), or None if already so."""
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    renominate = nominate is not None and nominate != (status.get("nominatedNodeName") or "")
    if (
        not renominate
        and current
        and current.get("status") == "False"
        and current.get("reason") == "Unschedulable"
        and current.get("message") == message
    ):
        return None
    since = current.get("lastTransitionTime") if current and current.get("status") == "False" else None
    patch: Obj = {
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
    if renominate:
        patch["status"]["nominatedNodeName"] = nominate or None
    return patch
