"""The StatefulSet controller (upstream's pkg/controller/statefulset, 1.32): pods with stable names,
network identities and claims, created and removed in ordinal order, rolled out from the highest
ordinal down, with the history `kubectl rollout` reads.

One sync, as upstream's sync/UpdateStatefulSet: read the set; adopt orphaned ControllerRevisions and
claim its pods (members by name that its selector matches); find the update revision (the current
template's; a template seen before gets its old revision renumbered, a new one a new revision, a name
clash bumps collisionCount) and the current one (status.currentRevision); let `logic.plan` decide the
steps and carry them out phase by phase (`writes.py`); write the status; drop revisions beyond
revisionHistoryLimit that nothing runs. A set with minReadySeconds whose pods are not all available is
looked at again after that long.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.daemonset import history
from controlplane.controllers.refmanager import RefManager, recheck, resolve_controller_ref, selecting_owners
from controlplane.controllers.statefulset import identity, logic
from controlplane.controllers.statefulset.writes import StatefulWrites
from kubeclient.errors import ApiError
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, key_of, meta, split_key
from kubeclient.selectors import SelectorError, from_label_selector

log = logging.getLogger("controlplane.controllers.statefulset")

Obj = dict[str, Any]
KIND, API_VERSION = "StatefulSet", "apps/v1"


def sts_path(namespace: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{quote(namespace)}/statefulsets/{quote(name)}"


def revisions_path(namespace: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{quote(namespace)}/controllerrevisions"
    return f"{base}/{quote(name)}" if name else base


def _revision_order(revision: Obj) -> tuple[int, str, str]:
    """history.SortControllerRevisions: by revision, then creation time, then name."""
    m = meta(revision)
    return history.revision_number(revision), m.get("creationTimestamp") or "", m.get("name", "")


class StatefulSetController(Controller):
    name = "statefulset"
    account = "statefulset-controller"

    def __init__(self, ctx: ControllerContext, clock: Callable[[], datetime] = podutil.now) -> None:
        super().__init__(ctx)
        self.clock = clock
        self.sets = ctx.informers.get("/apis/apps/v1/statefulsets", indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get(
            "/api/v1/pods", indexers={"namespace": by_namespace, "controller": by_controller_uid}
        )
        self.revisions = ctx.informers.get(
            "/apis/apps/v1/controllerrevisions",
            indexers={"namespace": by_namespace, "controller": by_controller_uid},
        )
        self.claims = ctx.informers.get(
            "/api/v1/persistentvolumeclaims", indexers={"namespace": by_namespace}
        )
        self.recorder = ctx.recorder("statefulset-controller")
        self.writes = StatefulWrites(self.client, self.recorder)
        self.sets.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.pods.add_handler(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.revisions.add_handler(
            on_add=self._owned_changed,
            on_update=lambda _o, n: self._owned_changed(n),
            on_delete=self._owned_changed,
        )
        self.claims.add_handler(
            on_add=self._claim_changed,
            on_update=lambda _o, n: self._claim_changed(n),
            on_delete=self._claim_changed,
        )

    # --- events --------------------------------------------------------------------------------------

    def _owner_key(self, obj: Obj) -> str | None:
        sts = resolve_controller_ref(self.sets, KIND, obj)
        return key_of(sts) if sts is not None else None

    def _owned_changed(self, obj: Obj) -> None:
        key = self._owner_key(obj)
        if key is not None:
            self.queue.add(key)

    def _orphan(self, pod: Obj) -> None:
        for sts in selecting_owners(self.sets, pod):
            if identity.is_member(sts, pod):
                self.enqueue(sts)

    def _pod_added(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.queue.add(key)
        elif controller_ref(pod) is None:
            self._orphan(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        old_key, key = self._owner_key(old), self._owner_key(new)
        if old_key is not None and old_key != key:
            self.queue.add(old_key)
        if key is None:
            if controller_ref(new) is None:
                self._orphan(new)
            return
        self.queue.add(key)
        sts = self.sets.get(key)
        min_ready = int(((sts or {}).get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0 and not podutil.is_ready(old) and podutil.is_ready(new):
            self.queue.add_after(key, min_ready)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.queue.add(key)

    def _claim_changed(self, claim: Obj) -> None:
        """A claim of `<template>-<set>-<ordinal>` that changed or went may unblock its set (a new pod
        waits for a stale claim to be gone)."""
        name = meta(claim).get("name", "")
        for sts in self.sets.by_index("namespace", str(meta(claim).get("namespace", ""))):
            templates = (sts.get("spec") or {}).get("volumeClaimTemplates") or []
            for template in templates:
                prefix = f"{(template.get('metadata') or {}).get('name', '')}-{meta(sts)['name']}-"
                if name.startswith(prefix) and re.fullmatch(r"[0-9]+", name[len(prefix) :]):
                    self.enqueue(sts)
                    break

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.sets.get(key)
        if cached is None:
            return
        sts = copy.deepcopy(cached)
        sts.setdefault("apiVersion", API_VERSION)
        sts.setdefault("kind", KIND)
        namespace, name = split_key(key)
        try:
            selector = from_label_selector((sts.get("spec") or {}).get("selector"))
        except SelectorError as err:
            log.warning("statefulset %s: bad selector: %s", key, err)
            return
        can_adopt = recheck(self.client, sts_path(namespace, name), meta(sts)["uid"])
        revisions = await RefManager(
            self.client,
            sts,
            selector,
            can_adopt,
            path_of=lambda r: revisions_path(meta(r)["namespace"], meta(r)["name"]),
        ).claim(self.revisions.by_index("namespace", namespace))
        members = [p for p in self.pods.by_index("namespace", namespace) if identity.is_member(sts, p)]
        pods = await RefManager(self.client, sts, selector, can_adopt).claim(members)
        revisions.sort(key=_revision_order)
        current, update, collisions = await self._history(sts, revisions)
        inputs = logic.Inputs(
            sts=sts,
            current_set=logic.apply_revision(sts, current),
            update_set=logic.apply_revision(sts, update),
            current=meta(current)["name"],
            update=meta(update)["name"],
            pods=pods,
            claims={meta(c)["name"]: c for c in self.claims.by_index("namespace", namespace)},
            now=self.clock(),
            collision_count=collisions,
        )
        plan = logic.plan(inputs)
        if plan.waiting_on:
            log.debug("statefulset %s waits for pod %s", key, plan.waiting_on)
        error: BaseException | None = None
        try:
            await self.writes.carry_out(inputs, plan)
        except Exception as err:  # the status is still written, as upstream's performUpdate does
            error = err
        await self._write_status(sts, plan.status)
        await self._truncate_history(sts, pods, revisions, current, update)
        if error is not None:
            raise error
        min_ready = int((sts.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0 and plan.status.get("availableReplicas", 0) != identity.replicas(sts):
            self.queue.add_after(key, min_ready)

    # --- history -------------------------------------------------------------------------------------

    async def _history(self, sts: Obj, revisions: list[Obj]) -> tuple[Obj, Obj, int]:
        """getStatefulSetRevisions: (current, update, collisionCount)."""
        status = sts.get("status") or {}
        collisions = int(status.get("collisionCount") or 0)
        number = history.revision_number(revisions[-1]) + 1 if revisions else 1
        wanted = history.patch_of(sts)
        equal = [r for r in revisions if r.get("data") == wanted]
        namespace = meta(sts)["namespace"]
        if equal and equal[-1] is revisions[-1]:
            update = revisions[-1]
        elif equal:
            body = copy.deepcopy(equal[-1])
            body["revision"] = number
            update = await self.client.replace(revisions_path(namespace, meta(body)["name"]), body)
        else:
            update, collisions = await self._create_revision(sts, number, collisions)
        current = next((r for r in revisions if meta(r)["name"] == status.get("currentRevision")), update)
        return current, update, collisions

    async def _create_revision(self, sts: Obj, number: int, collisions: int) -> tuple[Obj, int]:
        """CreateControllerRevision: a name taken by other data bumps the collision count and retries."""
        namespace = meta(sts)["namespace"]
        while True:
            counted = {**sts, "status": {**(sts.get("status") or {}), "collisionCount": collisions}}
            revision = history.new_revision(counted, number, kind=KIND)
            try:
                return await self.client.create(revisions_path(namespace), revision), collisions
            except ApiError as err:
                if not err.already_exists:
                    raise
            existing = await self.client.get(revisions_path(namespace, revision["metadata"]["name"]))
            if existing.get("data") == revision["data"]:
                return existing, collisions
            collisions += 1

    async def _truncate_history(
        self, sts: Obj, pods: list[Obj], revisions: list[Obj], current: Obj, update: Obj
    ) -> None:
        limit = (sts.get("spec") or {}).get("revisionHistoryLimit")
        live = {meta(current)["name"], meta(update)["name"], *(identity.revision_of(p) for p in pods)}
        idle = [r for r in revisions if meta(r)["name"] not in live]
        for revision in idle[: max(0, len(idle) - int(10 if limit is None else limit))]:
            try:
                await self.client.delete(
                    revisions_path(meta(sts)["namespace"], meta(revision)["name"]),
                    {"preconditions": {"uid": meta(revision)["uid"]}},
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise

    # --- status --------------------------------------------------------------------------------------

    async def _write_status(self, sts: Obj, status: Obj) -> None:
        """updateStatefulSetStatus: complete a finished rolling update; write only what changed."""
        logic.complete_rolling_update(sts, status)
        old = sts.get("status") or {}
        fields = (
            "replicas",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
            "availableReplicas",
            "currentRevision",
            "updateRevision",
            "collisionCount",
        )
        defaults = {"currentRevision": "", "updateRevision": ""}
        same = all(old.get(f, defaults.get(f, 0)) == status.get(f, defaults.get(f, 0)) for f in fields)
        if same and int(old.get("observedGeneration") or 0) >= int(status.get("observedGeneration") or 0):
            return
        new_status = {**{k: v for k, v in old.items() if k not in fields}, **logic.wire_status(status)}
        namespace, name = meta(sts)["namespace"], meta(sts)["name"]
        body = {**sts, "status": new_status}
        try:
            await self.client.replace(sts_path(namespace, name) + "/status", body)
        except ApiError as err:
            if err.not_found:
                return
            if not err.conflict:
                raise
            # Someone wrote the set since the cache saw it: once more on a fresh read (the next sync
            # retries anything later).
            fresh = await self.client.get(sts_path(namespace, name))
            fields_kept = {k: v for k, v in (fresh.get("status") or {}).items() if k not in fields}
            await self.client.replace(
                sts_path(namespace, name) + "/status",
                {**fresh, "status": {**fields_kept, **logic.wire_status(status)}},
            )
