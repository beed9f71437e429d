"""The Deployment controller (upstream's deployment_controller.go): watch Deployments, their ReplicaSets
and (for Recreate) their pods, and hand each Deployment that changed to one sync.

A sync reads the Deployment from the cache, claims its ReplicaSets (adopting matching orphans, releasing
ones whose labels stopped matching), groups their pods, and takes the first step that applies, in
upstream's order: a Deployment being deleted only gets its status; a paused one only scales; a rollback
annotation is acted on; a changed spec.replicas while several ReplicaSets have pods is a scaling event
(proportional); otherwise the strategy rolls out (Recreate or RollingUpdate). Writes happen only when
something differs from what is stored, so a resync of a settled Deployment sends nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.deployment import util
from controlplane.controllers.deployment.context import SyncContext, deployment_path, terminating_namespace
from controlplane.controllers.deployment.ownwrites import OwnWrites
from controlplane.controllers.deployment.recreate import rollout_recreate
from controlplane.controllers.deployment.rollback import rollback
from controlplane.controllers.deployment.rolling import rollout_rolling
from controlplane.controllers.deployment.sync import (
    check_paused_conditions,
    is_scaling_event,
    sync,
    sync_status_only,
)
from controlplane.controllers.deployment.util import meta, spec
from controlplane.controllers.refmanager import (
    CLAIM_INDEXERS,
    RefManager,
    claim_candidates,
    recheck,
    replicaset_path,
    selecting_owners,
)
from kubeclient.errors import ApiError
from kubeclient.events import WARNING
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, key_of
from kubeclient.objcopy import deep_copy
from kubeclient.selectors import Selector, SelectorError, from_label_selector

log = logging.getLogger("controlplane.controllers.deployment")

Obj = dict[str, Any]
KIND = "Deployment"


class DeploymentController(Controller):
    name = "deployment"

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.deployments = ctx.informers.get(
            "/apis/apps/v1/deployments", indexers={"namespace": by_namespace}
        )
        self.replicasets = ctx.informers.get("/apis/apps/v1/replicasets", indexers=CLAIM_INDEXERS)
        self.pods = ctx.informers.get("/api/v1/pods", indexers={"controller": by_controller_uid})
        self.recorder = ctx.recorder("deployment-controller")
        self.writes = 0  # API writes made by syncs (the benchmark reports it)
        self.own_deployments = OwnWrites()
        self.own_replicasets = OwnWrites()
        self.deployments.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.replicasets.add_handler(
            on_add=self._rs_added, on_update=self._rs_updated, on_delete=self._rs_deleted
        )
        self.pods.add_handler(on_delete=self._pod_deleted)

    # --- who to wake (addReplicaSet, updateReplicaSet, deleteReplicaSet, deletePod) ----------------------

    def _resolve(self, namespace: str, ref: Obj | None) -> Obj | None:
        """The Deployment a controllerRef names, if it is in the cache with that UID."""
        if ref is None or ref.get("kind") != KIND:
            return None
        d = self.deployments.get(f"{namespace}/{ref.get('name', '')}")
        return d if d is not None and meta(d).get("uid") == ref.get("uid") else None

    def _matching(self, rs: Obj) -> list[Obj]:
        """Deployments whose (non-empty) selector matches the ReplicaSet's labels."""
        return selecting_owners(self.deployments, rs)

    def _rs_added(self, rs: Obj) -> None:
        if meta(rs).get("deletionTimestamp"):
            self._rs_deleted(rs)
            return
        ref = controller_ref(rs)
        if ref is not None:
            d = self._resolve(meta(rs).get("namespace", ""), ref)
            if d is not None:
                self.enqueue(d)
            return
        for d in self._matching(rs):  # an orphan: whoever matches may adopt it
            self.enqueue(d)

    def _rs_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return  # a resync
        ns = meta(new).get("namespace", "")
        old_ref, new_ref = controller_ref(old), controller_ref(new)
        if old_ref != new_ref and old_ref is not None:
            d = self._resolve(ns, old_ref)
            if d is not None:
                self.enqueue(d)
        if new_ref is not None:
            d = self._resolve(ns, new_ref)
            if d is not None:
                self.enqueue(d)
            return
        if meta(old).get("labels") != meta(new).get("labels") or old_ref != new_ref:
            for d in self._matching(new):
                self.enqueue(d)

    def _rs_deleted(self, rs: Obj) -> None:
        self.own_replicasets.forget(key_of(rs))
        d = self._resolve(meta(rs).get("namespace", ""), controller_ref(rs))
        if d is not None:
            self.enqueue(d)

    def _deployment_of_pod(self, pod: Obj) -> Obj | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return None
        rs = self.replicasets.get(f"{meta(pod).get('namespace', '')}/{ref.get('name', '')}")
        if rs is None or meta(rs).get("uid") != ref.get("uid"):
            return None
        return self._resolve(meta(rs).get("namespace", ""), controller_ref(rs))

    def _pod_deleted(self, pod: Obj) -> None:
        """A Recreate Deployment waits for its old pods to be gone: wake it when the last one goes."""
        d = self._deployment_of_pod(pod)
        if d is None or util.strategy_type(d) != util.RECREATE:
            return
        owned = self.replicasets.by_index("controller", meta(d)["uid"])
        if not any(self._pods_of(d, owned).values()):
            self.enqueue(d)

    # --- what a sync works on ------------------------------------------------------------------------

    async def _claim_replica_sets(self, d: Obj, selector: Selector) -> list[Obj]:
        ns, name = meta(d)["namespace"], meta(d)["name"]
        cached = claim_candidates(self.replicasets, d)
        candidates = [self.own_replicasets.view(key_of(rs), rs) or rs for rs in cached]
        candidates += self.own_replicasets.unseen_created(f"{ns}/", {key_of(rs) for rs in cached})
        manager = RefManager(
            self.client,
            d,
            selector,
            recheck(self.client, deployment_path(ns, name), meta(d)["uid"]),
            path_of=replicaset_path,
        )
        return [deep_copy(rs) for rs in await manager.claim(candidates)]

    def _pods_of(self, d: Obj, rs_list: list[Obj]) -> dict[str, list[Obj]]:
        """The Deployment's pods (its selector matching) by the UID of their ReplicaSet, terminating and
        finished ones included (Recreate must see them)."""
        try:
            selector = from_label_selector(spec(d).get("selector"))
        except SelectorError:
            return {}
        pod_map: dict[str, list[Obj]] = {}
        for rs in rs_list:
            uid = meta(rs)["uid"]
            pod_map[uid] = [
                p
                for p in self.pods.by_index("controller", uid)
                if meta(p).get("namespace") == meta(d).get("namespace")
                and selector.matches(meta(p).get("labels") or {})
            ]
        return pod_map

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.own_deployments.view(key, self.deployments.get(key))
        if cached is None:
            self.own_deployments.forget(key)
            return  # deleted: its ReplicaSets are the garbage collector's
        d = deep_copy(cached)
        d.setdefault("apiVersion", "apps/v1")
        d.setdefault("kind", KIND)
        ctx = SyncContext(
            client=self.client,
            recorder=self.recorder,
            replicasets=self.replicasets,
            d=d,
            stored=deep_copy(d),
            now=podutil.now,
            enqueue_after=lambda delay: self.queue.add_after(key, delay),
            enqueue_rate_limited=lambda: self.queue.add_rate_limited(key),
            own_deployments=self.own_deployments,
            own_replicasets=self.own_replicasets,
        )
        try:
            await self._sync(ctx)
        except ApiError as err:
            if terminating_namespace(err):
                return  # nothing can be created in a namespace going away
            raise
        finally:
            self.writes += ctx.writes

    async def _sync(self, ctx: SyncContext) -> None:
        d = ctx.d
        raw_selector = spec(d).get("selector")
        if raw_selector == {}:
            ctx.event(
                WARNING,
                "SelectingAll",
                "This deployment is selecting all pods. A non-empty selector is required.",
            )
            if int(util.status(d).get("observedGeneration") or 0) < int(meta(d).get("generation") or 0):
                d.setdefault("status", {})["observedGeneration"] = meta(d).get("generation")
                await ctx.update_status()
            return
        try:
            selector = from_label_selector(raw_selector)
        except SelectorError as err:
            raise ValueError(
                f"deployment {ctx.namespace}/{ctx.name} has invalid label selector: {err}"
            ) from err
        rs_list = await self._claim_replica_sets(d, selector)
        pod_map = self._pods_of(d, rs_list)
        if meta(d).get("deletionTimestamp"):
            return await sync_status_only(ctx, rs_list)
        await check_paused_conditions(ctx)
        if spec(d).get("paused"):
            return await sync(ctx, rs_list)
        if util.rollback_to(d) is not None:
            return await rollback(ctx, rs_list)
        if await is_scaling_event(ctx, rs_list):
            return await sync(ctx, rs_list)
        kind = util.strategy_type(d)
        if kind == util.RECREATE:
            return await rollout_recreate(ctx, rs_list, pod_map)
        if kind == util.ROLLING_UPDATE:
            return await rollout_rolling(ctx, rs_list)
        raise ValueError(f"unexpected deployment strategy type: {kind}")
