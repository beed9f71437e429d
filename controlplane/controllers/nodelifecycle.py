"""The node lifecycle controller (upstream's pkg/controller/nodelifecycle/node_lifecycle_controller.go,
1.32 with the taint eviction controller separate): a node whose kubelet went silent stops being Ready.

Three loops:

1. every --node-monitor-period (5 s), the health pass (`nodehealth.assess` per node): a node that
   renewed neither its Lease nor its status for --node-monitor-grace-period (50 s) gets its kubelet's
   conditions set Unknown. When Ready leaves True the node gets a NodeNotReady event and its pods'
   Ready condition is set False (upstream's MarkPodsNotReady, a Warning NodeNotReady event each). A
   node seen NotReady/Unknown (as of the pass before) is queued in its zone for the NoExecute taint
   `node.kubernetes.io/not-ready` / `unreachable` (the two swap at once when the state flips); a Ready
   one loses both. The zones are judged as a whole: a zone in PartialDisruption taints at the
   secondary rate (0 in a zone of at most --large-cluster-size-threshold nodes), and when *every* zone
   is fully disrupted (say: the control plane lost its network, not the nodes) all NoExecute taints are
   taken off and tainting stops, until some node is Ready again;
2. every 100 ms, the tainting pass: each zone's queue hands out nodes at --node-eviction-rate (0.1
   nodes/s, burst 1) and they get their taint (timeAdded now); the taint eviction controller then
   deletes their pods as their tolerations say;
3. on every node change, the NoSchedule taints its conditions call for (TaintNodesByCondition: Ready
   False/Unknown, Memory/Disk/PID pressure, NetworkUnavailable, spec.unschedulable), and the beta os/arch
   labels kept equal to the stable ones. A pod newly bound to a node that is not Ready is marked not
   Ready too.

Events as upstream's, from `node-controller`: RegisteredNode / RemovingNode when a node appears in or
leaves the controller's view, NodeNotReady (`Node <name> status is now: NodeNotReady`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from prometheus_client import Counter, Gauge

from controlplane.controllers import nodehealth as health_
from controlplane.controllers import taints as taintutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.evictionqueue import EvictionQueue, TimedValue
from controlplane.controllers.nodehealth import NodeHealth, condition
from controlplane.controllers.nodetaints import node_path, remove_taints, swap_taints
from controlplane.controllers.options import DEFAULTS
from controlplane.controllers.podstatus import update_pod_condition
from controlplane.controllers.podutil import now as utcnow
from controlplane.controllers.podutil import ready_condition
from kubeclient.client import MERGE_PATCH
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import by_node_name, key_of, meta
from kubeclient.objcopy import deep_copy
from kubeclient.workqueue import QueueMetrics, ShutDown, WorkQueue

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
COMPONENT = "node-controller"
LEASE_NAMESPACE = "kube-node-lease"
LEASES = "/apis/coordination.k8s.io/v1/leases"
TAINTING_PERIOD = 0.1  # upstream's NodeEvictionPeriod
HEALTH_UPDATE_RETRIES, RETRY_SLEEP = 5, 0.02
PARALLEL_NODES = 8  # upstream's nodeUpdateWorkerSize
POD_WORKERS = 4
# (stable, beta) labels kept equal, the stable one the source (upstream's labelReconcileInfo).
RECONCILED_LABELS = (
    ("kubernetes.io/os", "beta.kubernetes.io/os"),
    ("kubernetes.io/arch", "beta.kubernetes.io/arch"),
)


def _node_ref(node: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": meta(node).get("name", ""), "uid": meta(node).get("uid", "")},
    }


def _status_of(cond: Obj | None) -> str:
    return str((cond or {}).get("status") or "")


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    account = "node-controller"
    workers = PARALLEL_NODES  # the node queue: NoSchedule taints and labels

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)

        def opt(key: str) -> float:
            return float(ctx.option(key, DEFAULTS[key]))

        self.monitor_period = opt("node_monitor_period")
        self.grace = opt("node_monitor_grace_period")
        self.startup_grace = opt("node_startup_grace_period")
        self.eviction_qps = opt("node_eviction_rate")
        self.secondary_qps = opt("secondary_node_eviction_rate")
        self.large_cluster = int(opt("large_cluster_size_threshold"))
        self.unhealthy_threshold = opt("unhealthy_zone_threshold")
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"node": by_node_name})
        # Every Lease, as upstream's lease informer: the garbage collector watches them all anyway, so
        # a kube-node-lease-only informer was a second watch decoding each renewal again.
        self.leases = ctx.informers.get(LEASES)
        self.recorder = ctx.recorder(COMPONENT)
        self.pod_queue: WorkQueue[str] = WorkQueue(
            "node_lifecycle_controller_pods", metrics=QueueMetrics.of(ctx.registry)
        )
        self.health: dict[str, NodeHealth] = {}
        self.known: dict[str, Obj] = {}
        self.zone_states: dict[str, str] = {}
        self.tainters: dict[str, EvictionQueue] = {}
        self.retry_nodes: set[str] = set()
        self.passes = 0
        self._metrics(ctx)
        self.nodes.add_handler(
            on_add=self.enqueue,
            on_update=lambda _o, n: self.enqueue(n),
            on_delete=lambda n: self.retry_nodes.discard(meta(n).get("name", "")),
        )
        self.pods.add_handler(on_add=lambda p: self._pod_changed(None, p), on_update=self._pod_changed)

    def _metrics(self, ctx: ControllerContext) -> None:
        reg = ctx.registry
        self.evictions = Counter(
            "node_collector_evictions",
            "[STABLE] Number of Node evictions that happened since current instance of NodeController started.",
            ["zone"],
            registry=reg,
        )
        self.zone_size = Gauge(
            "node_collector_zone_size",
            "[ALPHA] Gauge measuring number of registered Nodes per zones.",
            ["zone"],
            registry=reg,
        )
        self.zone_health = Gauge(
            "node_collector_zone_health",
            "[ALPHA] Gauge measuring percentage of healthy nodes per zone.",
            ["zone"],
            registry=reg,
        )
        self.unhealthy = Gauge(
            "node_collector_unhealthy_nodes_in_zone",
            "[ALPHA] Gauge measuring number of not Ready Nodes per zones.",
            ["zone"],
            registry=reg,
        )

    def _pod_changed(self, old: Obj | None, new: Obj) -> None:
        node = (new.get("spec") or {}).get("nodeName")
        if node and (old is None or (old.get("spec") or {}).get("nodeName") != node):
            self.pod_queue.add(key_of(new))

    # --- running -------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        loops = [
            asyncio.create_task(
                self._every(self.monitor_period, self.monitor_node_health), name="node-health"
            ),
            asyncio.create_task(
                self._every(TAINTING_PERIOD, self.no_execute_tainting_pass), name="node-tainting"
            ),
            *(asyncio.create_task(self._pod_worker(), name=f"node-pods-{i}") for i in range(POD_WORKERS)),
        ]
        try:
            await super().run(stop)
        finally:
            self.pod_queue.shutdown()
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    async def _every(self, period: float, fn: Callable[[], Awaitable[None]]) -> None:
        """fn, then a pause of `period`, forever (wait.Until: the period runs from the end of each pass)."""
        while True:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node lifecycle pass failed pass=%s", getattr(fn, "__name__", fn))
            await asyncio.sleep(period)

    async def _pod_worker(self) -> None:
        while True:
            try:
                key = await self.pod_queue.get()
            except ShutDown:
                return
            try:
                await self._process_pod(key)
                self.pod_queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as err:
                log.info("pod not marked not ready pod=%s error=%s", key, err)
                self.pod_queue.add_rate_limited(key)
            finally:
                self.pod_queue.done(key)

    # --- the node queue: NoSchedule taints and labels ------------------------------------------------

    async def sync(self, key: str) -> None:
        node = self.nodes.get(key)
        if node is None:
            return
        failed = not await self._no_schedule_taints(node)
        await self._reconcile_labels(node)
        if failed:
            raise RuntimeError(f"failed to swap taints of node {key}")

    async def _no_schedule_taints(self, node: Obj) -> bool:
        add, drop = taintutil.difference(
            taintutil.condition_taints(node), taintutil.owned_no_schedule_taints(node)
        )
        if not add and not drop:
            return True
        return await swap_taints(self.client, node, add, drop, utcnow())

    async def _reconcile_labels(self, node: Obj) -> None:
        labels = meta(node).get("labels") or {}
        update = {
            beta: labels[stable]
            for stable, beta in RECONCILED_LABELS
            if stable in labels and labels.get(beta) != labels[stable]
        }
        if update:
            await self.client.patch(
                node_path(meta(node)["name"]), {"metadata": {"labels": update}}, content_type=MERGE_PATCH
            )

    # --- the health pass -----------------------------------------------------------------------------

    async def monitor_node_health(self) -> None:
        nodes = self.nodes.list()
        added, deleted, new_zones = self._classify(nodes)
        for node in new_zones:
            self._add_zone(node)
        for node in added:
            name = meta(node)["name"]
            log.info("controller observed a new node node=%s", name)
            self.recorder.event(
                _node_ref(node),
                NORMAL,
                "RegisteredNode",
                f"Node {name} event: Registered Node {name} in Controller",
            )
            self.known[name] = node
            self._add_zone(node)
            await self._mark_reachable(node)
        for node in deleted:
            name = meta(node)["name"]
            log.info("controller observed a node deletion node=%s", name)
            self.recorder.event(
                _node_ref(node),
                NORMAL,
                "RemovingNode",
                f"Node {name} event: Removing Node {name} from Controller",
            )
            self.known.pop(name, None)
            self.health.pop(name, None)
        zones: dict[str, list[Obj | None]] = {}
        pending = iter(nodes)

        async def worker() -> None:
            # PARALLEL_NODES workers share the nodes (as upstream's nodeUpdateWorkerSize), rather than a
            # task per node every pass: most nodes need no request, and making and gathering a task for
            # each took 3 % of the controller manager's CPU at 200 nodes. Each node is the cached one,
            # not a copy: nothing in the pass changes it (the status to write and the taint lists are
            # new objects), and a deep copy of every node every 5 s took 2.2 %.
            for node in pending:
                await self._monitor_one(node, zones)

        await asyncio.gather(*(worker() for _ in range(PARALLEL_NODES)))
        await self._handle_disruption(zones, nodes)
        self.passes += 1

    def _classify(self, nodes: list[Obj]) -> tuple[list[Obj], list[Obj], list[Obj]]:
        names = {meta(n)["name"] for n in nodes}
        added = [n for n in nodes if meta(n)["name"] not in self.known]
        new_zones = [
            n for n in nodes if meta(n)["name"] in self.known and health_.zone_key(n) not in self.zone_states
        ]
        deleted = [n for name, n in self.known.items() if name not in names]
        return added, deleted, new_zones

    def _add_zone(self, node: Obj) -> EvictionQueue:
        zone = health_.zone_key(node)
        if zone not in self.zone_states:
            self.zone_states[zone] = health_.INITIAL
            self.tainters[zone] = EvictionQueue(self.eviction_qps)
            self.evictions.labels(zone).inc(0)
        return self.tainters[zone]

    async def _monitor_one(self, node: Obj, zones: dict[str, list[Obj | None]]) -> None:
        result = await self._update_health(node)
        if result is None:
            return
        node, observed, current = result
        name = meta(node)["name"]
        if not health_.excluded_from_disruption(node):
            zones.setdefault(health_.zone_key(node), []).append(current)
        if current is not None:
            await self._taint_based_eviction(node, observed)
            went_down = _status_of(current) != "True" and _status_of(observed) == "True"
            if went_down:
                self.recorder.event(
                    _node_ref(node), NORMAL, "NodeNotReady", f"Node {name} status is now: NodeNotReady"
                )
            if went_down or (name in self.retry_nodes and _status_of(observed) != "True"):
                errors = await self.mark_pods_not_ready(self.pods.by_index("node", name), name)
                if errors:
                    log.warning(
                        "unable to mark all pods NotReady on node=%s error=%s; queuing for retry",
                        name,
                        errors[0],
                    )
                    self.retry_nodes.add(name)
                    return
        self.retry_nodes.discard(name)

    async def _update_health(self, node: Obj) -> tuple[Obj, Obj, Obj | None] | None:
        """Judge the node, writing its status if it went Unknown (from a fresh read after a conflict);
        (node, Ready before, Ready after), or None when it could not be written."""
        name = meta(node)["name"]
        for _ in range(HEALTH_UPDATE_RETRIES):
            lease = self.leases.get(f"{LEASE_NAMESPACE}/{name}")
            verdict = health_.assess(
                node,
                self.health.get(name),
                lease,
                utcnow(),
                grace=self.grace,
                startup_grace=self.startup_grace,
            )
            self.health[name] = verdict.health
            if verdict.new_status is None:
                return node, verdict.observed_ready, verdict.current_ready
            try:
                written = await self.client.replace(
                    node_path(name) + "/status", {**node, "status": verdict.new_status}
                )
            except ApiError as err:
                log.info("node status not written node=%s error=%s", name, err)
                await asyncio.sleep(RETRY_SLEEP)
                try:
                    node = await self.client.get(node_path(name))
                except ApiError as err:
                    log.error(
                        "node not read again to retry its health (deleted?) node=%s error=%s", name, err
                    )
                    return None
                continue
            log.info("node went silent node=%s ready=%s", name, _status_of(verdict.current_ready))
            self.health[name] = NodeHealth(verdict.health.probe_timestamp, verdict.new_status, lease)
            return written, verdict.observed_ready, verdict.current_ready
        log.error("update health of node failed, skipping: no pods will be evicted node=%s", name)
        return None

    async def _taint_based_eviction(self, node: Obj, observed: Obj) -> None:
        """Queue the NoExecute taint for a node that was NotReady/Unknown (or swap it at once when it
        holds the other one); take both off a Ready node."""
        taints = taintutil.node_taints(node)
        status = _status_of(observed)
        if status in ("False", "Unknown"):
            wanted, other = (
                (taintutil.NOT_READY_NO_EXECUTE, taintutil.UNREACHABLE_NO_EXECUTE)
                if status == "False"
                else (taintutil.UNREACHABLE_NO_EXECUTE, taintutil.NOT_READY_NO_EXECUTE)
            )
            if taintutil.has_taint(taints, other):
                if not await swap_taints(self.client, node, [wanted], [other], utcnow()):
                    log.error(
                        "failed to swap %s for %s on node=%s; next pass",
                        other["key"],
                        wanted["key"],
                        meta(node)["name"],
                    )
            elif self._mark_for_tainting(node, wanted):
                log.debug("node queued for taint node=%s taint=%s", meta(node)["name"], wanted["key"])
        elif status == "True":
            await self._mark_reachable(node)

    def _mark_for_tainting(self, node: Obj, wanted: Obj) -> bool:
        queue = self.tainters.get(health_.zone_key(node)) or self._add_zone(node)
        name = meta(node)["name"]
        if not taintutil.has_taint(taintutil.node_taints(node), wanted):
            queue.remove(name)  # tainted once, but the taint is gone (removed by hand): again
        return queue.add(name, str(meta(node).get("uid", "")))

    async def _mark_reachable(self, node: Obj) -> bool:
        name = meta(node)["name"]
        try:
            await remove_taints(self.client, name, [taintutil.UNREACHABLE_NO_EXECUTE], node)
            await remove_taints(self.client, name, [taintutil.NOT_READY_NO_EXECUTE], node)
        except ApiError as err:
            if not err.not_found:
                log.error("failed to remove NoExecute taints from node=%s error=%s", name, err)
            return False
        queue = self.tainters.get(health_.zone_key(node))
        return queue.remove(name) if queue is not None else False

    async def mark_pods_not_ready(self, pods: list[Obj], node_name: str) -> list[ApiError]:
        """Set the Ready condition of the node's pods False (upstream's MarkPodsNotReady)."""
        errors: list[ApiError] = []
        stamp = health_.stamp(utcnow())
        for cached in pods:
            if (cached.get("spec") or {}).get("nodeName") != node_name:
                continue
            cond = ready_condition(cached)
            if cond is None:
                continue
            pod = deep_copy(cached)
            pod.setdefault("apiVersion", "v1")
            pod.setdefault("kind", "Pod")
            if not update_pod_condition(pod["status"], {**cond, "status": "False"}, stamp):
                continue
            path = (
                f"/api/v1/namespaces/{quote(meta(pod)['namespace'])}/pods/{quote(meta(pod)['name'])}/status"
            )
            try:
                await self.client.replace(path, pod)
            except ApiError as err:
                if err.not_found:
                    continue
                errors.append(err)
            self.recorder.event(pod, WARNING, "NodeNotReady", "Node is not ready")
        return errors

    async def _process_pod(self, key: str) -> None:
        """A pod just bound: marked not Ready at once if its node is not."""
        pod = self.pods.get(key)
        if pod is None:
            return
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        health = self.health.get(node_name)
        if health is None:
            return  # not judged yet, or gone
        if self.nodes.get(node_name) is None:
            raise LookupError(f"node {node_name} not in the cache")
        ready = condition(health.status, health_.READY)
        if ready is None or _status_of(ready) == "True":
            return
        errors = await self.mark_pods_not_ready([pod], node_name)
        if errors:
            raise errors[0]

    # --- zones ---------------------------------------------------------------------------------------

    def _judge_zones(self, zones: dict[str, list[Obj | None]]) -> tuple[dict[str, str], bool]:
        """Each zone's state this pass (and its gauges), and whether every zone is fully disrupted."""
        states: dict[str, str] = {}
        for zone, conditions in zones.items():
            unhealthy, state = health_.zone_state(conditions, self.unhealthy_threshold)
            self.zone_size.labels(zone).set(len(conditions))
            self.zone_health.labels(zone).set(100 * (len(conditions) - unhealthy) / len(conditions))
            self.unhealthy.labels(zone).set(unhealthy)
            states[zone] = state
            self.zone_states.setdefault(zone, health_.INITIAL)
        return states, all(s == health_.FULL_DISRUPTION for s in states.values())

    def _were_all_down(self, zones: dict[str, list[Obj | None]]) -> bool:
        """Whether every zone was fully disrupted last pass, forgetting zones without nodes on the way
        (as upstream, up to the first zone that was not)."""
        for zone, state in list(self.zone_states.items()):
            if zone not in zones:
                self.zone_size.labels(zone).set(0)
                self.zone_health.labels(zone).set(100)
                self.unhealthy.labels(zone).set(0)
                del self.zone_states[zone]
                continue
            if state != health_.FULL_DISRUPTION:
                return False
        return True

    async def _handle_disruption(self, zones: dict[str, list[Obj | None]], nodes: list[Obj]) -> None:
        new_states, all_down = self._judge_zones(zones)
        all_were_down = self._were_all_down(zones)
        if all_down and all_were_down:
            return
        if all_down:
            log.info("all nodes are not Ready: entering master disruption mode (no NoExecute taints)")
            for node in nodes:
                await self._mark_reachable(node)
            for zone in self.zone_states:
                self._tainter(zone).swap_limiter(0)
                self.zone_states[zone] = health_.FULL_DISRUPTION
            return
        if all_were_down:
            log.info("some nodes are Ready again: exiting master disruption mode")
            now = utcnow()
            for node in nodes:
                remembered = self.health.get(meta(node)["name"])
                if remembered is not None:
                    remembered.probe_timestamp = now
        for zone, state in list(self.zone_states.items()):
            new = new_states.get(zone, "")
            if state == new and not all_were_down:
                continue
            log.info("zone is now in a new state zone=%r state=%s", zone, new)
            self._set_limiter(zone, len(zones.get(zone, [])), new)
            self.zone_states[zone] = new

    def _tainter(self, zone: str) -> EvictionQueue:
        queue = self.tainters.get(zone)
        if queue is None:
            queue = self.tainters[zone] = EvictionQueue(self.eviction_qps)
        return queue

    def _set_limiter(self, zone: str, size: int, state: str) -> None:
        if state in (health_.NORMAL, health_.FULL_DISRUPTION):
            self._tainter(zone).swap_limiter(self.eviction_qps)
        elif state == health_.PARTIAL_DISRUPTION:
            self._tainter(zone).swap_limiter(
                health_.reduced_qps(size, self.large_cluster, self.secondary_qps)
            )

    # --- the tainting pass ---------------------------------------------------------------------------

    async def no_execute_tainting_pass(self) -> None:
        for zone, queue in list(self.tainters.items()):
            await queue.try_each(lambda item, zone=zone: self._taint(item, zone))

    async def _taint(self, item: TimedValue, zone: str) -> tuple[bool, float]:
        node = self.nodes.get(item.value)
        if node is None:
            return True, 0.0  # gone
        ready = condition(node.get("status"), health_.READY)
        if ready is None:
            return False, 0.05
        status = _status_of(ready)
        if status == "False":
            add, drop = taintutil.NOT_READY_NO_EXECUTE, taintutil.UNREACHABLE_NO_EXECUTE
        elif status == "Unknown":
            add, drop = taintutil.UNREACHABLE_NO_EXECUTE, taintutil.NOT_READY_NO_EXECUTE
        else:
            return True, 0.0  # Ready again meanwhile
        done = await swap_taints(self.client, node, [add], [drop], utcnow())
        if done:
            self.evictions.labels(zone).inc()
            log.info("node tainted node=%s taint=%s:%s", item.value, add["key"], add["effect"])
        return done, 0.0
