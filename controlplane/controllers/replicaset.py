"""The ReplicaSet controller (and the ReplicationController one, the same loop over the older kind):
keep `spec.replicas` pods matching the selector, and report what there is.

One sync, as upstream's syncReplicaSet (pkg/controller/replicaset/replica_set.go):

1. read the ReplicaSet from the cache (gone: forget its expectations);
2. claim its pods: adopt matching orphans, release owned pods that stopped matching;
3. if its expectations are satisfied (the cache has seen every create and delete it asked for), create
   or delete the difference: creates in slow-start batches of 1, 2, 4, ... (a template the API server
   refuses fails once, not 500 times), at most 500 per sync, deletions chosen by upstream's ranking;
4. write status: replicas, fullyLabeledReplicas, readyReplicas, availableReplicas (ready for
   minReadySeconds), observedGeneration, and the ReplicaFailure condition while creating or deleting
   fails.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.expectations import Expectations
from controlplane.controllers.podcontrol import PodControl, pod_from_template
from controlplane.controllers.ranking import pods_to_delete
from controlplane.controllers.refmanager import (
    CLAIM_INDEXERS,
    RefManager,
    claim_candidates,
    recheck,
    resolve_controller_ref,
    selecting_owners,
)
from kubeclient.errors import ApiError
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, key_of, meta, split_key
from kubeclient.objcopy import deep_copy
from kubeclient.selectors import Selector, SelectorError, from_label_selector, from_set

Obj = dict[str, Any]
BURST_REPLICAS = 500
SLOW_START_INITIAL_BATCH = 1
REPLICA_FAILURE = "ReplicaFailure"


@dataclass(frozen=True)
class OwnerKind:
    """The kind a ReplicaSet-style controller runs: where it lives and how its selector reads."""

    controller: str  # --controllers name
    component: str  # event source
    api_version: str
    kind: str
    collection: str  # e.g. /apis/apps/v1/replicasets

    def path(self, namespace: str, name: str = "") -> str:
        prefix, _, plural = self.collection.rpartition("/")
        base = f"{prefix}/namespaces/{quote(namespace)}/{plural}"
        return f"{base}/{quote(name)}" if name else base

    def selector(self, owner: Obj) -> Selector:
        raw = (owner.get("spec") or {}).get("selector")
        if self.kind == "ReplicationController":
            # A map, defaulted from the template's labels by the API server.
            return (
                from_set(raw or {})
                if raw
                else from_set(
                    ((owner["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
                )
            )
        return from_label_selector(raw if isinstance(raw, dict) else None)


REPLICA_SET = OwnerKind(
    "replicaset", "replicaset-controller", "apps/v1", "ReplicaSet", "/apis/apps/v1/replicasets"
)
REPLICATION_CONTROLLER = OwnerKind(
    "replicationcontroller",
    "replication-controller",
    "v1",
    "ReplicationController",
    "/api/v1/replicationcontrollers",
)


def slow_start_batches(count: int, initial: int = SLOW_START_INITIAL_BATCH) -> list[int]:
    """Batch sizes 1, 2, 4, ... that add up to `count` (upstream's slowStartBatch)."""
    sizes, batch, remaining = [], min(initial, count), count
    while remaining > 0 and batch > 0:
        sizes.append(batch)
        remaining -= batch
        batch = min(2 * batch, remaining)
    return sizes


def calculate_status(owner: Obj, pods: list[Obj], failure: tuple[str, str] | None) -> Obj:
    """The status the owner should show for its active, claimed `pods` (upstream's calculateStatus);
    `failure` is (reason, message) of this sync's failed create/delete, if any."""
    spec = owner.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    now = podutil.now()
    status: Obj = {
        "replicas": len(pods),
        "fullyLabeledReplicas": sum(
            1
            for p in pods
            if all((meta(p).get("labels") or {}).get(k) == v for k, v in template_labels.items())
        ),
        "readyReplicas": sum(1 for p in pods if podutil.is_ready(p)),
        "availableReplicas": sum(1 for p in pods if podutil.is_available(p, min_ready, now)),
        "observedGeneration": meta(owner).get("generation", 0),
    }
    conditions = [dict(c) for c in (owner.get("status") or {}).get("conditions") or []]
    existing = next((c for c in conditions if c.get("type") == REPLICA_FAILURE), None)
    if failure is not None and existing is None:
        conditions.append(
            {
                "type": REPLICA_FAILURE,
                "status": "True",
                "reason": failure[0],
                "message": failure[1],
                "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    elif failure is None and existing is not None:
        conditions = [c for c in conditions if c.get("type") != REPLICA_FAILURE]
    if conditions:
        status["conditions"] = conditions
    return status


class ReplicaSetController(Controller):
    name = REPLICA_SET.controller
    account = REPLICA_SET.component
    kind = REPLICA_SET

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.expectations = Expectations()
        self.owners = ctx.informers.get(
            self.kind.collection, indexers={"namespace": by_namespace, "controller": by_controller_uid}
        )
        self.pods = ctx.informers.get("/api/v1/pods", indexers=CLAIM_INDEXERS)
        self.recorder = ctx.recorder(self.kind.component)
        self.pod_control = PodControl(self.client, self.recorder)
        self.owners.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.pods.add_handler(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )

    # --- pod events, as upstream's addPod/updatePod/deletePod -------------------------------------------

    def _owner_key(self, pod: Obj) -> str | None:
        """The key of the owner of this kind that controls the pod, if it is in our cache."""
        owner = resolve_controller_ref(self.owners, self.kind.kind, pod)
        return key_of(owner) if owner is not None else None

    def _matching_owners(self, pod: Obj) -> list[str]:
        return [key_of(o) for o in selecting_owners(self.owners, pod, self.kind.selector)]

    def _pod_added(self, pod: Obj) -> None:
        if meta(pod).get("deletionTimestamp"):
            self._pod_deleted(pod)  # seen first while terminating: counts as a deletion
            return
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.creation_observed(key)
            self.queue.add(key)
        elif controller_ref(pod) is None:
            for owner in self._matching_owners(pod):  # an orphan: whoever matches may adopt it
                self.queue.add(owner)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return  # a resync
        if meta(new).get("deletionTimestamp"):
            self._pod_deleted(new)
            if meta(old).get("labels") != meta(new).get("labels"):
                self._pod_deleted(old)
            return
        old_key, new_key = self._owner_key(old), self._owner_key(new)
        if old_key and old_key != new_key:
            self.queue.add(old_key)
        if new_key:
            self.queue.add(new_key)
            owner = self.owners.get(new_key)
            min_ready = int(((owner or {}).get("spec") or {}).get("minReadySeconds") or 0)
            if min_ready > 0 and not podutil.is_ready(old) and podutil.is_ready(new):
                # Available once ready for minReadySeconds: look again then.
                self.queue.add_after(new_key, min_ready + 1)
        elif controller_ref(new) is None:
            for owner in self._matching_owners(new):
                self.queue.add(owner)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.deletion_observed(key, key_of(pod))
            self.queue.add(key)

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        owner = self.owners.get(key)
        if owner is None:
            self.expectations.delete(key)
            return
        owner = deep_copy(owner)
        owner.setdefault("apiVersion", self.kind.api_version)
        owner.setdefault("kind", self.kind.kind)
        try:
            selector = self.kind.selector(owner)
        except SelectorError as err:
            return self._invalid_selector(owner, err)
        namespace, name = split_key(key)
        needs_sync = self.expectations.satisfied(key)
        candidates = [p for p in claim_candidates(self.pods, owner) if podutil.is_active(p)]
        manager = RefManager(
            self.client,
            owner,
            selector,
            recheck(self.client, self.kind.path(namespace, name), meta(owner)["uid"]),
        )
        pods = await manager.claim(candidates)
        failure: tuple[str, str] | None = None
        error: Exception | None = None
        if needs_sync and not meta(owner).get("deletionTimestamp"):
            try:
                await self._manage(key, owner, pods)
            except ApiError as err:
                error = err
                diff = len(pods) - int((owner.get("spec") or {}).get("replicas", 1))
                failure = ("FailedCreate" if diff < 0 else "FailedDelete", err.message or str(err))
        status = calculate_status(owner, pods, failure)
        await self._update_status(owner, status)
        if error is not None:
            raise error
        min_ready = int((owner.get("spec") or {}).get("minReadySeconds") or 0)
        if (
            min_ready > 0
            and status["readyReplicas"] == int(owner["spec"].get("replicas", 1))
            and status["availableReplicas"] != status["readyReplicas"]
        ):
            self.queue.add_after(key, min_ready)

    def _invalid_selector(self, owner: Obj, err: SelectorError) -> None:
        self.recorder.event(owner, "Warning", "SelectorParsingFailed", str(err))

    async def _manage(self, key: str, owner: Obj, pods: list[Obj]) -> None:
        wanted = int((owner.get("spec") or {}).get("replicas", 1))
        diff = len(pods) - wanted
        if diff < 0:
            await self._create(key, owner, min(-diff, BURST_REPLICAS))
        elif diff > 0:
            await self._delete(key, owner, pods, min(diff, BURST_REPLICAS))

    async def _create(self, key: str, owner: Obj, count: int) -> None:
        self.expectations.expect_creations(key, count)
        template = (owner.get("spec") or {}).get("template") or {}
        made = 0
        for size in slow_start_batches(count):
            results = await asyncio.gather(
                *(self.pod_control.create(owner, pod_from_template(template, owner)) for _ in range(size)),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            # A failed create will never be seen arrive.
            self.expectations.lower(key, adds=len(errors))
            made += size - len(errors)
            if errors:
                skipped = count - made - len(errors)
                self.expectations.lower(key, adds=skipped)  # nor will the batches not tried
                first = errors[0]
                if isinstance(first, ApiError) and first.forbidden and "being terminated" in first.message:
                    return  # the namespace is going away; nothing to report
                raise first

    async def _delete(self, key: str, owner: Obj, pods: list[Obj], count: int) -> None:
        related = self._related_pods(owner, pods)
        victims = pods_to_delete(pods, related, count, podutil.now())
        self.expectations.expect_deletions(key, [key_of(p) for p in victims])
        results = await asyncio.gather(
            *(self.pod_control.delete(owner, p) for p in victims), return_exceptions=True
        )
        failure: BaseException | None = None
        for pod, result in zip(victims, results, strict=True):
            if isinstance(result, BaseException):
                # Will not be seen to go (or already gone): stop waiting for it.
                self.expectations.deletion_observed(key, key_of(pod))
                if not (isinstance(result, ApiError) and result.not_found) and failure is None:
                    failure = result
        if failure is not None:
            raise failure

    def _related_pods(self, owner: Obj, pods: list[Obj]) -> list[Obj]:
        """Pods of every owner controlled by the same controller as this one (a Deployment's
        ReplicaSets), for the "doubled up" rank; just its own pods otherwise."""
        parent = controller_ref(owner)
        if parent is None:
            return pods
        siblings = self.owners.by_index("controller", str(parent.get("uid", "")))
        related: list[Obj] = []
        for sibling in siblings:
            related.extend(self.pods.by_index("controller", meta(sibling)["uid"]))
        return related

    async def _update_status(self, owner: Obj, status: Obj) -> None:
        if _significant(owner.get("status") or {}) == _significant(status):
            return
        namespace, name = meta(owner)["namespace"], meta(owner)["name"]
        body = {**owner, "status": status}
        path = self.kind.path(namespace, name) + "/status"
        try:
            await self.client.replace(path, body)
        except ApiError as err:
            if err.not_found:
                return
            if not err.conflict:
                raise
            # Our copy was stale: once more from a fresh read (upstream retries the status update once).
            fresh = await self.client.get(self.kind.path(namespace, name))
            await self.client.replace(path, {**fresh, "status": status})


def _significant(status: Obj) -> Obj:
    """Status without its zero values, which upstream's JSON omits (omitempty), for comparing."""
    return {k: v for k, v in status.items() if v not in (0, None, [], {})}


class ReplicationControllerController(ReplicaSetController):
    name = REPLICATION_CONTROLLER.controller
    account = REPLICATION_CONTROLLER.component
    kind = REPLICATION_CONTROLLER
