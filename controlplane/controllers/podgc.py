"""The pod garbage collector (upstream's pkg/controller/podgc/gc_controller.go): pods nobody else will
ever remove, force-deleted every 20 s.

- terminated pods (phase neither Pending, Running nor Unknown) beyond --terminated-pod-gc-threshold
  (12500; <= 0 turns this off), evicted ones first, then the oldest, names breaking ties;
- terminating pods on a node that is not Ready and carries `node.kubernetes.io/out-of-service`
  (the admin's word that the node is gone for good);
- pods bound to a node that does not exist: the node must be missing from the cache and, after a
  quarantine of 40 s, still answer 404 to a GET (a node informer behind the API must not cost pods);
- terminating pods never scheduled (a finalizer holds them; no kubelet will ever confirm them).

A pod not yet terminal is first patched to phase Failed (orphans also get DisruptionTarget=True,
reason DeletionByPodGC, `PodGC: node no longer exists`), as upstream 1.32 does, so an owner sees a
failure rather than a pod Running forever; then it is deleted with gracePeriodSeconds 0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter

from controlplane.controllers import podstatus
from controlplane.controllers import taints as taintutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.nodehealth import condition, stamp
from controlplane.controllers.nodetaints import node_path
from controlplane.controllers.options import DEFAULTS
from controlplane.controllers.podutil import now as utcnow
from controlplane.controllers.podutil import parse_time
from kubeclient.errors import ApiError
from kubeclient.informer import by_node_name, meta

log = logging.getLogger("controlplane.controllers")

Obj = dict[str, Any]
GC_CHECK_PERIOD = 20.0  # option pod_gc_period (tests)
QUARANTINE = 40.0  # option pod_gc_quarantine (tests)
GC_KEY = "gc"
TERMINATED, ORPHANED = "terminated", "orphaned"
TERMINATING = "terminating"  # index value only: terminating pods (out of service, unscheduled)
TERMINATING_OUT_OF_SERVICE, TERMINATING_UNSCHEDULED = "terminating_out_of_service", "terminating_unscheduled"
ORPHAN_REASON, ORPHAN_MESSAGE = "DeletionByPodGC", "PodGC: node no longer exists"


# --- which pods (pure) ------------------------------------------------------------------------------


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _node_name(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def is_terminated(pod: Obj) -> bool:
    return _phase(pod) not in ("Pending", "Running", "Unknown")


def is_terminating(pod: Obj) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def is_evicted(pod: Obj) -> bool:
    return _phase(pod) == "Failed" and (pod.get("status") or {}).get("reason") == "Evicted"


def _eviction_then_age(pod: Obj) -> tuple[bool, datetime, str]:
    created = parse_time(meta(pod).get("creationTimestamp")) or datetime.min.replace(tzinfo=UTC)
    return (not is_evicted(pod), created, str(meta(pod).get("name", "")))


def terminated_to_delete(pods: list[Obj], threshold: int) -> list[Obj]:
    """The terminated pods beyond `threshold`: evicted first, then oldest."""
    terminated = [p for p in pods if is_terminated(p)]
    excess = len(terminated) - threshold
    if excess <= 0:
        return []
    return sorted(terminated, key=_eviction_then_age)[:excess]


def node_ready(node: Obj) -> bool:
    cond = condition(node.get("status"), "Ready")
    return bool(cond and cond.get("status") == "True")


def terminating_out_of_service(pods: list[Obj], nodes: dict[str, Obj]) -> list[Obj]:
    """Terminating pods on a not Ready node tainted out-of-service (a pod whose node is not cached is
    left to the orphan rule)."""
    chosen = []
    for pod in pods:
        node = nodes.get(_node_name(pod)) if is_terminating(pod) else None
        if (
            node is not None
            and not node_ready(node)
            and taintutil.has_taint_key(taintutil.node_taints(node), taintutil.OUT_OF_SERVICE)
        ):
            chosen.append(pod)
    return sorted(chosen, key=_eviction_then_age)


def missing_nodes(bound_to: Iterable[str], existing: set[str]) -> set[str]:
    """The nodes pods are bound to (the pods' node index) that the node cache does not have."""
    return {name for name in bound_to if name and name not in existing}


def unscheduled_terminating(pods: list[Obj]) -> list[Obj]:
    return [p for p in pods if is_terminating(p) and not _node_name(p)]


def by_gc_state(pod: Obj) -> list[str]:
    """Index function: which of the collector's rules may concern the pod, so that a pass reads those
    pods only (most pods of a cluster are running, and a pass every 20 s over all of them grows with
    the cluster twice: more pods, and more passes while they are made)."""
    return [
        state
        for state, holds in ((TERMINATED, is_terminated(pod)), (TERMINATING, is_terminating(pod)))
        if holds
    ]


class Quarantine:
    """Node names that must stay missing for `seconds` before a GET decides (upstream's delaying
    queue of node names: noting a name again never postpones it)."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._waiting: dict[str, float] = {}
        self._ready: set[str] = set()

    def _promote(self) -> None:
        now = self._clock()
        for name, at in list(self._waiting.items()):
            if at <= now:
                del self._waiting[name]
                self._ready.add(name)

    def note(self, names: set[str]) -> None:
        self._promote()
        due = self._clock() + self.seconds
        for name in names:
            self._waiting[name] = min(self._waiting.get(name, due), due)

    def drain(self) -> set[str]:
        """The names whose quarantine is over (each handed out once per quarantine)."""
        self._promote()
        ready, self._ready = self._ready, set()
        return ready


# --- the controller ---------------------------------------------------------------------------------


class PodGCController(Controller):
    name = "podgc"
    account = "pod-garbage-collector"
    workers = 1

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.threshold = int(
            ctx.option("terminated_pod_gc_threshold", DEFAULTS["terminated_pod_gc_threshold"])
        )
        self.period = float(ctx.option("pod_gc_period", GC_CHECK_PERIOD))
        self.quarantine = Quarantine(float(ctx.option("pod_gc_quarantine", QUARANTINE)))
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"gc": by_gc_state, "node": by_node_name})
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.deleting = Counter(
            "pod_gc_collector_force_delete_pods",
            "[ALPHA] Number of pods that are being forcefully deleted since the Pod GC Controller started.",
            ["namespace", "reason"],
            registry=ctx.registry,
        )
        self.delete_errors = Counter(
            "pod_gc_collector_force_delete_pod_errors",
            "[ALPHA] Number of errors encountered when "
            "forcefully deleting the pods since the Pod GC Controller started.",
            ["namespace", "reason"],
            registry=ctx.registry,
        )

    async def run(self, stop: asyncio.Event) -> None:
        self.queue.add(GC_KEY)
        await super().run(stop)

    async def sync(self, key: str) -> None:
        try:
            await self.gc()
        finally:
            self.queue.add_after(GC_KEY, self.period)

    async def gc(self) -> None:
        nodes = {meta(n).get("name", ""): n for n in self.nodes.list()}
        if self.threshold > 0 and len(self.pods.index_keys("gc", TERMINATED)) > self.threshold:
            victims = terminated_to_delete(self.pods.by_index("gc", TERMINATED), self.threshold)
            if victims:
                log.info("garbage collecting terminated pods count=%d", len(victims))
            await asyncio.gather(*(self._delete(p, TERMINATED) for p in victims))
        terminating = self.pods.by_index("gc", TERMINATING)
        await asyncio.gather(
            *(
                self._delete(p, TERMINATING_OUT_OF_SERVICE)
                for p in terminating_out_of_service(terminating, nodes)
            )
        )
        await self._gc_orphaned(set(nodes))
        for pod in unscheduled_terminating(terminating):
            log.info(
                "deleting unscheduled terminating pod pod=%s/%s",
                meta(pod).get("namespace"),
                meta(pod).get("name"),
            )
            await self._delete(pod, TERMINATING_UNSCHEDULED)

    async def _gc_orphaned(self, existing: set[str]) -> None:
        self.quarantine.note(missing_nodes(self.pods.index_values("node"), existing))
        gone = set()
        for name in self.quarantine.drain():
            if name in existing:
                continue
            try:
                await self.client.get(node_path(name))
            except ApiError as err:
                if err.not_found:
                    gone.add(name)
                else:
                    log.warning("node not read node=%s error=%s", name, err)
        for pod in [p for name in sorted(gone) for p in self.pods.by_index("node", name)]:
            if _node_name(pod) in gone:
                log.info(
                    "deleting orphaned pod pod=%s/%s node=%s",
                    meta(pod).get("namespace"),
                    meta(pod).get("name"),
                    _node_name(pod),
                )
                await self._delete(pod, ORPHANED, podstatus.disruption_target(ORPHAN_REASON, ORPHAN_MESSAGE))

    async def _delete(self, pod: Obj, reason: str, cond: Obj | None = None) -> None:
        namespace = str(meta(pod).get("namespace", ""))
        self.deleting.labels(namespace, reason).inc()
        try:
            await self._mark_failed_and_delete(pod, cond)
        except ApiError as err:
            if not err.not_found:
                log.warning(
                    "pod not garbage collected pod=%s/%s reason=%s error=%s",
                    namespace,
                    meta(pod).get("name"),
                    reason,
                    err,
                )
                self.delete_errors.labels(namespace, reason).inc()

    async def _mark_failed_and_delete(self, pod: Obj, cond: Obj | None) -> None:
        if _phase(pod) not in ("Succeeded", "Failed"):
            patch: Obj = {"phase": "Failed"}
            if cond is not None:
                status = {"conditions": [dict(c) for c in (pod.get("status") or {}).get("conditions") or []]}
                podstatus.update_pod_condition(status, cond, stamp(utcnow()))
                patch["conditions"] = [c for c in status["conditions"] if c.get("type") == cond["type"]]
            await podstatus.patch_pod_status(self.client, pod, patch)
        await self.client.delete(
            podstatus.pod_path(meta(pod)["namespace"], meta(pod)["name"]), {"gracePeriodSeconds": 0}
        )
