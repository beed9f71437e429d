"""Finishes namespace deletion: removes everything a Terminating namespace holds, then the namespace.

Upstream's namespace controller runs in the controller manager and talks to the API; ours runs inside
the API server on the registry because it is the only controller the API itself needs to keep its
promise (deleting a namespace removes what it holds). The Namespace kind starts it. Its timing and its
reports are upstream's (pkg/controller/namespace):

- a namespace is looked at 5 s after each change that finds it being deleted
  (namespaceDeletionGracePeriod): clients deleting a file that lists the namespace first still find its
  objects, and a create racing the deletion lands before the sweep;
- each sweep deletes every kind's content, then counts what is left. Pods still within their
  termination grace period, or objects held by finalizers (15 s assumed), make the next look come after
  half that estimate plus one second; anything else left over is an error, retried with backoff
  (5 ms doubling to 60 s);
- the sweep's findings are the namespace's five deletion conditions (`nsconditions.py`); an aggregated
  API whose APIService is unavailable is a discovery failure that keeps the namespace (its content
  cannot be known), as a genuine cluster keeps it while, say, metrics-server is down;
- once nothing is left the `kubernetes` finalizer goes, and with it the namespace.

Pods bound to a node are deleted gracefully, so the namespace waits for their kubelet, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from controlplane.apiserver.aggregator.apis import APIServiceInfo
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.apiservice import KIND as APISERVICES
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.meta import now, parse_time
from controlplane.apiserver.nsconditions import ContentTotals, merge_conditions
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.registry import Registry
from controlplane.storage.cache import CacheEvent
from kubeclient.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    ShutDown,
    WorkQueue,
)

log = logging.getLogger("controlplane.nsfinalizer")
FINALIZER = "kubernetes"
GRACE_PERIOD = 5.0  # upstream's namespaceDeletionGracePeriod
FINALIZER_ESTIMATE = 15  # seconds assumed for an object's finalizers (upstream's finalizerEstimateSeconds)
WORKERS = 10  # upstream's --concurrent-namespace-syncs


@dataclass
class Sweep:
    """What one pass over a namespace's content found."""

    estimate: int = 0  # seconds until what is left is expected to go; 0: nothing expected
    remaining: dict[Kind, int] = field(default_factory=dict)
    finalizers: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # Aggregated group/versions whose APIService is unavailable: discovery lists them Stale, so their
    # content cannot be known, and the namespace waits for them as upstream's does.
    stale: list[str] = field(default_factory=list)


class ContentRemains(Exception):
    """Content is still going; look again after `estimate` seconds' worth."""

    def __init__(self, estimate: int) -> None:
        super().__init__(
            f"some content remains in the namespace, estimate {estimate} seconds before it is removed"
        )
        self.estimate = estimate


class NamespaceFinalizer:
    def __init__(self, registry: Registry, namespaces: Kind, grace_period: float = GRACE_PERIOD) -> None:
        self.registry = registry
        self.namespaces = namespaces
        self.grace_period = grace_period
        self.queue: WorkQueue[str] = WorkQueue(
            "namespace",
            rate_limiter=MaxOfRateLimiter(
                (ItemExponentialFailureRateLimiter(0.005, 60.0), BucketRateLimiter())
            ),
        )
        self._workers: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Watch namespaces (also those Terminating when the server stopped, or marked through another
        server) and start the workers."""
        for cached in self.registry.cache.subscribe(self.namespaces.bucket, self._changed):
            self._enqueue(cached.view)
        self._workers = [
            asyncio.create_task(self._work(), name=f"namespace-finalizer-{i}") for i in range(WORKERS)
        ]

    async def stop(self) -> None:
        self.queue.shutdown()
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _changed(self, event: CacheEvent) -> None:
        if event.type != "DELETED":
            self._enqueue(event.obj.view)

    def _enqueue(self, view: dict[str, Any]) -> None:
        meta = view.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            self.queue.add_after(meta["name"], self.grace_period)

    async def _work(self) -> None:
        while True:
            try:
                name = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._sync(name)
                self.queue.forget(name)
            except ContentRemains as remains:
                self.queue.add_after(name, remains.estimate // 2 + 1)
            except ApiError as err:
                if err.code != 404:
                    log.warning("namespace=%s step=finalize error=%s", name, err.message)
                    self.queue.add_rate_limited(name)
            except Exception:
                log.exception("namespace=%s step=finalize", name)
                self.queue.add_rate_limited(name)
            finally:
                self.queue.done(name)

    async def _sync(self, name: str) -> None:
        cached = await self.registry.get(self.namespaces, "", name)
        ns = cached.obj
        meta = ns["metadata"]
        if not meta.get("deletionTimestamp") or FINALIZER not in (ns.get("spec") or {}).get("finalizers", []):
            return
        sweep = await self._sweep(name, parse_time(meta["deletionTimestamp"]) or now())
        await self._report(name, sweep)
        if sweep.errors or sweep.stale:
            raise RuntimeError("; ".join([*sweep.errors, *sweep.stale]))
        if sweep.estimate > 0:
            raise ContentRemains(sweep.estimate)
        await self.registry.guaranteed_update(self.namespaces, "", name, _drop_finalizer, "finalize")

    async def _sweep(self, name: str, deleted_at: dt.datetime) -> Sweep:
        """Delete what the namespace holds, then count what is left (upstream's deleteAllContent)."""
        await self.registry.cache.wait_fresh()
        sweep = Sweep(stale=self._stale_group_versions())
        for res in self.registry.kinds.sweepable():
            items = self.registry.cache.list(res.bucket, res.prefix(name))
            if not items:
                continue
            estimate = _pod_estimate(res, items, deleted_at)
            pending = [c for c in items if not c.view["metadata"].get("deletionTimestamp")]
            try:
                await self.registry.delete_collection(
                    res, name, pending, DeleteOptions(propagation="Background")
                )
            except ApiError as err:
                sweep.errors.append(err.message)
                sweep.estimate = max(sweep.estimate, estimate)
                continue
            await self.registry.cache.wait_fresh()
            left = self.registry.cache.list(res.bucket, res.prefix(name))
            if not left:
                continue
            sweep.remaining[res] = len(left)
            held = 0
            for c in left:
                for finalizer in c.obj["metadata"].get("finalizers") or []:
                    sweep.finalizers[finalizer] = sweep.finalizers.get(finalizer, 0) + 1
                    held += 1
            if estimate:
                sweep.estimate = max(sweep.estimate, estimate)
            elif held:
                sweep.estimate = max(sweep.estimate, FINALIZER_ESTIMATE)
            else:
                sweep.errors.append(
                    f"unexpected items still remain in namespace: {name} for gvr: "
                    f"{res.group}/{res.version}, Resource={res.plural}"
                )
        return sweep

    def _stale_group_versions(self) -> list[str]:
        out = []
        for cached in self.registry.cache.list(APISERVICES.bucket, APISERVICES.prefix("")):
            info = APIServiceInfo.parse(cached.obj)
            if not info.local and not info.available:
                out.append(f"{info.group}/{info.version}")
        return sorted(out)

    async def _report(self, name: str, sweep: Sweep) -> None:
        totals = ContentTotals(
            {f"{res.plural}.{res.group}": n for res, n in sweep.remaining.items()},
            sweep.finalizers,
            sweep.stale,
        )

        def update(current: dict[str, Any]) -> dict[str, Any]:
            status = current.setdefault("status", {})
            status["conditions"] = merge_conditions(status.get("conditions") or [], totals, sweep.errors)
            return current

        await self.registry.guaranteed_update(self.namespaces, "", name, update, "status")


def _pod_estimate(res: Kind, items: list[Any], deleted_at: dt.datetime) -> int:
    """Pods still running may take their termination grace period, counted from the namespace's
    deletion (upstream's estimateGracefulTerminationForPods); other kinds end at once."""
    if res.group or res.plural != "pods":
        return 0
    estimate = 0
    for cached in items:
        pod = cached.obj
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        if isinstance(grace, int) and grace > estimate:
            estimate = grace
    if (now() - deleted_at).total_seconds() >= estimate:
        return 0
    return estimate


def _drop_finalizer(current: dict[str, Any]) -> dict[str, Any]:
    spec = current.setdefault("spec", {})
    spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
    return current
