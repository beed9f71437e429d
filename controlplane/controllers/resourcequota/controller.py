"""The resource-quota controller (upstream's pkg/controller/resourcequota): each ResourceQuota's
`status.hard` is its spec.hard and `status.used` the usage of the live objects of its namespace that
its scopes match, summed by the same evaluators the quota admission charges with
(`controlplane/quota/`).

Admission charges creates as they happen; this loop recounts: when a quota is created or its hard
limits change, when usage goes away (an object deleted, a pod turning Succeeded/Failed, a Service
leaving NodePort/LoadBalancer; upstream's replenishment), and every `--resource-quota-sync-period`
(5 min) for all quotas, which also returns what a charged write that then failed took. The status is
written with the quota's resourceVersion, so a recount never overwrites a charge it has not seen: the
conflict sends it round again; a recount that would lower usage confirms it with a live list, so an
informer behind an admitted create never gives its share out twice.

One gap remains between a charge and its object: admission charges the quota before it stores the
object, so a recount whose live list falls between the two finds the object missing and lowers usage
below the truth. Upstream's recount, from informer caches alone, has the same window and waits for the
next full resync; here the arrival of a counted object also recounts its namespace's quotas (a
no-op when the status already holds it) a second later, so such an under-count lasts a second, not
five minutes. The sync compares with the newest status it knows, the cache's or its own last
write's, so a recount queued behind its own write does not take a stale cache for the truth.

Informers for the core resources quotas count are shared from the start; a
`count/<resource>.<group>` quota gets its resource's informer (found by discovery) on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.quota import resources as rl
from controlplane.quota.evaluators import (
    Evaluator,
    counts,
    evaluators_for,
    scope_selectors,
    service_quota_type,
)
from kubeclient.discovery import ApiResource, server_resources
from kubeclient.errors import ApiError
from kubeclient.eventwait import wait_event
from kubeclient.informer import Informer, by_namespace, meta, split_key

log = logging.getLogger("controlplane.controllers.resourcequota")

Obj = dict[str, Any]
SYNC_PERIOD = 300.0  # --resource-quota-sync-period
DISCOVERY_PERIOD = 30.0  # rediscover at most this often for an unknown count/ resource
ADD_RECOUNT_DELAY = 1.0  # a counted object's arrival recounts its quotas this much later
CORE = (
    "pods",
    "services",
    "persistentvolumeclaims",
    "configmaps",
    "secrets",
    "replicationcontrollers",
    "resourcequotas",
)


class ResourceQuotaController(Controller):
    name = "resourcequota"
    account = "resourcequota-controller"
    workers = 5  # --concurrent-resource-quota-syncs

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.sync_period = float(ctx.option("resourcequota_sync_period", SYNC_PERIOD))
        self.quotas = ctx.informers.get("/api/v1/resourcequotas", indexers={"namespace": by_namespace})
        self.quotas.add_handler(on_add=self.enqueue, on_update=self._quota_changed)
        self.listers: dict[tuple[str, str], Informer] = {}
        self.collections: dict[tuple[str, str], ApiResource] = {}
        self._discovered: dict[tuple[str, str], ApiResource] = {}
        self._discovered_at = 0.0
        self._written: dict[str, Obj] = {}  # the quota each key's last status write returned
        for resource in CORE:
            self.collections[("", resource)] = ApiResource(
                "v1", "", resource, True, frozenset({"list", "watch"})
            )
            self._watch(("", resource), f"/api/v1/{resource}")

    # --- feeding the queue ---------------------------------------------------------------------------

    def _quota_changed(self, old: Obj, new: Obj) -> None:
        # Status writes (ours and admission's) are noise; a change of hard limits needs a recount.
        if (old.get("spec") or {}).get("hard") != (new.get("spec") or {}).get("hard"):
            self.enqueue(new)

    def _watch(self, gr: tuple[str, str], path: str) -> Informer:
        informer = self.ctx.informers.get(path, indexers={"namespace": by_namespace})
        if gr not in self.listers:
            self.listers[gr] = informer
            informer.add_handler(
                on_add=lambda obj: self._added(gr, obj),
                on_update=lambda old, new: self._updated(gr, old, new),
                on_delete=lambda obj: self._replenish(gr, obj),
            )
        return informer

    def _added(self, gr: tuple[str, str], obj: Obj) -> None:
        """A new object that counts: recount soon, so a charge a concurrent recount undid comes back. A
        burst of creates (each already charged by admission) costs one recount a second, not one each."""
        if gr != ("", "pods") or counts(obj):
            self._replenish(gr, obj, ADD_RECOUNT_DELAY)

    def _updated(self, gr: tuple[str, str], old: Obj, new: Obj) -> None:
        """Only updates that release usage (upstream's monitor filter): a pod turning terminal, a
        Service changing between ClusterIP, NodePort and LoadBalancer."""
        if gr == ("", "pods"):
            release = counts(old) and not counts(new)
        elif gr == ("", "services"):
            release = service_quota_type(old) != service_quota_type(new)
        else:
            release = False
        if release:
            self._replenish(gr, new)

    def _replenish(self, gr: tuple[str, str], obj: Obj, delay: float = 0.0) -> None:
        namespace = str(meta(obj).get("namespace") or "")
        for quota in self.quotas.by_index("namespace", namespace):
            hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
            if any(key == gr for key, _ in evaluators_for(hard)):
                self.enqueue_after(quota, delay)

    def enqueue_all(self) -> None:
        for quota in self.quotas.list():
            self.enqueue(quota)

    async def run(self, stop: asyncio.Event) -> None:
        resync = asyncio.create_task(self._resync(stop), name="resourcequota-resync")
        try:
            await super().run(stop)
        finally:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync

    async def _resync(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await wait_event(stop, self.sync_period)
            if not stop.is_set():
                self.enqueue_all()

    # --- the listers ---------------------------------------------------------------------------------

    async def _lister(self, gr: tuple[str, str]) -> Informer | None:
        """The informer of a resource a quota counts, started on first need; None if not served."""
        informer = self.listers.get(gr)
        if informer is None:
            resource = await self._discover(gr)
            if resource is None or not resource.namespaced or "watch" not in resource.verbs:
                return None
            self.collections[gr] = resource
            informer = self._watch(gr, resource.collection())
            self.ctx.informers.start()
        if not informer.synced.is_set():
            await wait_event(informer.synced, 30)
        return informer

    async def _discover(self, gr: tuple[str, str]) -> ApiResource | None:
        if gr not in self._discovered and time.monotonic() - self._discovered_at > DISCOVERY_PERIOD:
            self._discovered_at = time.monotonic()
            found: dict[tuple[str, str], ApiResource] = {}
            for r in await server_resources(self.client):
                found.setdefault((r.group, r.plural), r)  # the preferred (first listed) version
            self._discovered = found
        return self._discovered.get(gr)

    # --- the sync ------------------------------------------------------------------------------------

    @staticmethod
    def _sum(quota: Obj, evaluator: Evaluator, names: list[str], objects: list[Obj]) -> rl.Resources:
        """UsageStats: the evaluator's names summed over the objects the quota's scopes match."""
        total: rl.Resources = dict.fromkeys(names, rl.ZERO)
        selectors = scope_selectors(quota)
        for obj in objects:
            if all(evaluator.scope_matches(s, obj) for s in selectors):
                total = rl.add(total, rl.mask(evaluator.usage(obj), names))
        return total

    async def _usage(
        self, quota: Obj, gr: tuple[str, str], evaluator: Evaluator, hard: list[str]
    ) -> rl.Resources | None:
        """The usage from the informer's cache; where that is below what the status says (a release),
        confirmed by a live list: a cache behind an admitted create must not hand its share out twice."""
        informer = await self._lister(gr)
        if informer is None:
            return None
        namespace = str(meta(quota).get("namespace") or "")
        names = evaluator.matching_resources(hard)
        total = self._sum(quota, evaluator, names, informer.by_index("namespace", namespace))
        before = rl.parse((quota.get("status") or {}).get("used"))
        if any(n in before and q.amount < before[n].amount for n, q in total.items()):
            items, _ = await self.client.list(self.collections[gr].collection(namespace))
            total = self._sum(quota, evaluator, names, items)
        return total

    def _newest(self, key: str) -> Obj | None:
        """The cached quota, or our own last write of it where the cache has not caught up yet."""
        cached = self.quotas.get(key)
        written = self._written.get(key)
        if cached is None or written is None:
            self._written.pop(key, None)
            return cached
        if _revision(written) > _revision(cached):
            return written
        del self._written[key]
        return cached

    async def sync(self, key: str) -> None:
        quota = self._newest(key)
        if quota is None:
            return
        namespace, name = split_key(key)
        hard_text = dict((quota.get("spec") or {}).get("hard") or {})
        hard = list(hard_text)
        status = quota.get("status") or {}
        # Past observations are kept for what no evaluator counts (yet); the rest is recounted.
        used = rl.parse(status.get("used"))
        for gr, evaluator in evaluators_for(hard):
            counted = await self._usage(quota, gr, evaluator, hard)
            if counted is not None:
                used.update(counted)
        used = rl.mask(used, hard)
        if rl.equal(rl.parse(status.get("hard")), rl.parse(hard_text)) and rl.equal(
            used, rl.parse(status.get("used"))
        ):
            if "used" in status:
                return
        body = dict(quota)
        body["status"] = {"hard": hard_text, "used": rl.dump(used)}
        try:
            self._written[key] = await self.client.replace(
                f"/api/v1/namespaces/{namespace}/resourcequotas/{name}/status", body
            )
        except ApiError as err:
            self._written.pop(key, None)
            if err.not_found:
                return
            raise


def _revision(obj: Obj) -> int:
    """The object's resourceVersion as a number (this API server's are its store's revisions); 0 when
    it is not one, so the cache wins."""
    text = str(meta(obj).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 0
