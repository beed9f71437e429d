"""The DaemonSet controller (upstream's pkg/controller/daemon, 1.32): one pod on every node that should
run it, kept up to date with the template, and the history `kubectl rollout` reads.

One sync, as upstream's syncDaemonSet: read the DaemonSet, claim its pods (adopting matching orphans) and
its ControllerRevisions; make sure the current template has the newest revision (`history.py`); unless
it is being deleted and once the cache has seen this controller's last creates and deletes
(expectations), run the per-node decisions (`logic.manage`: create where missing, delete failed, extra
and misplaced pods) and, when nothing was left to do there, one RollingUpdate step (`logic.rolling_update`;
OnDelete replaces a pod only once someone deletes it); drop revisions beyond revisionHistoryLimit that no
pod runs; write the status numbers.

Pods are made from the template with the `controller-revision-hash` and `pod-template-generation` labels,
the daemon tolerations, and a required node affinity on the node's name, so the default scheduler binds
them (`placement.py`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers import podutil
from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.daemonset import history, logic, placement
from controlplane.controllers.expectations import Expectations
from controlplane.controllers.podcontrol import PodControl, pod_from_template
from controlplane.controllers.refmanager import RefManager, recheck, resolve_controller_ref, selecting_owners
from controlplane.controllers.replicaset import slow_start_batches
from kubeclient.errors import ApiError
from kubeclient.events import NORMAL, WARNING
from kubeclient.informer import by_controller_uid, by_namespace, controller_ref, key_of, meta, split_key
from kubeclient.selectors import SelectorError, from_label_selector

log = logging.getLogger("controlplane.controllers.daemonset")

Obj = dict[str, Any]
KIND, API_VERSION = "DaemonSet", "apps/v1"
BURST = 250


def ds_path(namespace: str, name: str) -> str:
    return f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets/{quote(name)}"


def revisions_path(namespace: str, name: str = "") -> str:
    base = f"/apis/apps/v1/namespaces/{quote(namespace)}/controllerrevisions"
    return f"{base}/{quote(name)}" if name else base


def daemon_pod(ds: Obj, node: str, digest: str) -> Obj:
    """The pod for `node`: the template, its revision labels, the daemon tolerations, pinned to the node."""
    template = copy.deepcopy((ds.get("spec") or {}).get("template") or {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels[history.HASH_LABEL] = digest
    generation = logic.template_generation(ds)
    if generation:
        labels[history.GENERATION_LABEL] = generation
    spec = template.setdefault("spec", {})
    spec["tolerations"] = placement.with_daemon_tolerations(spec)
    spec["affinity"] = placement.pinned_affinity(spec.get("affinity"), node)
    return pod_from_template(template, ds)


class DaemonSetController(Controller):
    name = "daemonset"
    account = "daemon-set-controller"

    def __init__(self, ctx: ControllerContext, clock: Callable[[], datetime] = podutil.now) -> None:
        super().__init__(ctx)
        self.clock = clock
        self.daemonsets = ctx.informers.get("/apis/apps/v1/daemonsets", indexers={"namespace": by_namespace})
        self.pods = ctx.informers.get(
            "/api/v1/pods", indexers={"namespace": by_namespace, "controller": by_controller_uid}
        )
        self.nodes = ctx.informers.get("/api/v1/nodes")
        self.revisions = ctx.informers.get(
            "/apis/apps/v1/controllerrevisions",
            indexers={"namespace": by_namespace, "controller": by_controller_uid},
        )
        self.recorder = ctx.recorder("daemonset-controller")
        self.pod_control = PodControl(self.client, self.recorder)
        self.expectations = Expectations()
        self.failed_backoff = logic.FailedPodBackoff()
        self.daemonsets.add_handler(
            on_add=self.enqueue, on_update=lambda _o, n: self.enqueue(n), on_delete=self.enqueue
        )
        self.pods.add_handler(
            on_add=self._pod_added, on_update=self._pod_updated, on_delete=self._pod_deleted
        )
        self.nodes.add_handler(on_add=lambda _n: self._all(), on_update=self._node_updated)
        self.revisions.add_handler(
            on_add=self._owned_changed,
            on_update=lambda _o, n: self._owned_changed(n),
            on_delete=self._owned_changed,
        )

    # --- events --------------------------------------------------------------------------------------

    def _all(self) -> None:
        for ds in self.daemonsets.list():
            self.enqueue(ds)

    def _node_updated(self, old: Obj, new: Obj) -> None:
        def relevant(node: Obj) -> Any:
            return (
                meta(node).get("labels"),
                (node.get("spec") or {}).get("taints"),
                (node.get("spec") or {}).get("unschedulable"),
            )

        if relevant(old) != relevant(new):
            self._all()

    def _owner_key(self, obj: Obj) -> str | None:
        ds = resolve_controller_ref(self.daemonsets, KIND, obj)
        return key_of(ds) if ds is not None else None

    def _owned_changed(self, obj: Obj) -> None:
        key = self._owner_key(obj)
        if key is not None:
            self.queue.add(key)

    def _orphan(self, pod: Obj) -> None:
        for ds in selecting_owners(self.daemonsets, pod):
            self.enqueue(ds)

    def _pod_added(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is None:
            if controller_ref(pod) is None:
                self._orphan(pod)
            return
        if meta(pod).get("deletionTimestamp"):
            self.expectations.deletion_observed(key, key_of(pod))
        else:
            self.expectations.creation_observed(key)
        self.queue.add(key)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        key = self._owner_key(new)
        if key is None:
            if controller_ref(new) is None:
                self._orphan(new)
            return
        if meta(new).get("deletionTimestamp") and not meta(old).get("deletionTimestamp"):
            self.expectations.deletion_observed(key, key_of(new))
        self.queue.add(key)
        ds = self.daemonsets.get(key)
        min_ready = int(((ds or {}).get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0 and not podutil.is_ready(old) and podutil.is_ready(new):
            self.queue.add_after(key, min_ready + 1)

    def _pod_deleted(self, pod: Obj) -> None:
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.deletion_observed(key, key_of(pod))
            self.queue.add(key)

    # --- the sync ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        cached = self.daemonsets.get(key)
        if cached is None:
            self.expectations.delete(key)
            return
        ds = copy.deepcopy(cached)
        ds.setdefault("apiVersion", API_VERSION)
        ds.setdefault("kind", KIND)
        namespace, name = split_key(key)
        try:
            selector = from_label_selector((ds.get("spec") or {}).get("selector"))
        except SelectorError as err:
            self.recorder.event(ds, WARNING, "SelectorParsingFailed", str(err))
            return
        if selector.empty:
            self.recorder.event(
                ds,
                WARNING,
                "SelectingAll",
                "This daemon set is selecting all pods. A non-empty selector is required.",
            )
            return
        manager = RefManager(
            self.client, ds, selector, recheck(self.client, ds_path(namespace, name), meta(ds)["uid"])
        )
        pods = await manager.claim(self.pods.by_index("namespace", namespace))
        nodes = self.nodes.list()
        digest = await self._history(ds)
        if digest is None:
            return  # a hash collision: the status now counts it, the next sync uses a new name
        pods_by_node = logic.by_node(pods)
        if not meta(ds).get("deletionTimestamp") and self.expectations.satisfied(key):
            plan = logic.manage(ds, nodes, pods_by_node)
            self._limit_failed(key, ds, plan)
            changed = await self._apply(key, ds, plan, digest)
            strategy = ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type")
            if not changed and strategy == "RollingUpdate":
                desired = logic.status(ds, nodes, pods_by_node, digest, self.clock())[
                    "desiredNumberScheduled"
                ]
                await self._apply(
                    key, ds, logic.rolling_update(ds, pods_by_node, desired, digest, self.clock()), digest
                )
        await self._clean_history(ds, pods, digest)
        await self._write_status(ds, logic.status(ds, nodes, pods_by_node, digest, self.clock()))
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
        if min_ready > 0:
            self.queue.add_after(key, min_ready)

    def _limit_failed(self, key: str, ds: Obj, plan: logic.Plan) -> None:
        """Failed pods go (FailedDaemonPod) unless their node's backoff says wait; then look again later.
        Succeeded ones go at once (SucceededDaemonPod)."""
        now = time.monotonic()
        for pod, node in plan.failed:
            backoff_key = f"{meta(ds)['uid']}/{node}"
            wait = self.failed_backoff.wait(backoff_key, now)
            if wait > 0:
                plan.delete = [p for p in plan.delete if p is not pod]
                self.queue.add_after(key, wait)
                continue
            self.failed_backoff.step(backoff_key, now)
            self.recorder.event(
                ds,
                WARNING,
                "FailedDaemonPod",
                f"Found failed daemon pod "
                f"{meta(pod)['namespace']}/{meta(pod)['name']} on node {node}, will try to kill it",
            )
        for pod, node in plan.succeeded:
            self.recorder.event(
                ds,
                NORMAL,
                "SucceededDaemonPod",
                f"Found succeeded daemon pod "
                f"{meta(pod)['namespace']}/{meta(pod)['name']} on node {node}, will try to delete it",
            )

    async def _apply(self, key: str, ds: Obj, plan: logic.Plan, digest: str) -> bool:
        """Carry out a plan's deletions and creations; True if there were any."""
        if not plan.delete and not plan.create_on:
            return False
        errors: list[BaseException] = []
        if plan.delete:
            self.expectations.expect_deletions(key, [key_of(p) for p in plan.delete])
            results = await asyncio.gather(
                *(self.pod_control.delete(ds, p) for p in plan.delete), return_exceptions=True
            )
            for pod, result in zip(plan.delete, results, strict=True):
                if isinstance(result, BaseException):
                    self.expectations.deletion_observed(key, key_of(pod))
                    if not (isinstance(result, ApiError) and result.not_found):
                        errors.append(result)
        nodes = plan.create_on[:BURST]
        if nodes:
            errors += await self._create(key, ds, nodes, digest)
        if errors:
            raise errors[0]
        return True

    async def _create(self, key: str, ds: Obj, nodes: list[str], digest: str) -> list[BaseException]:
        self.expectations.expect_creations(key, len(nodes))
        pending = list(nodes)
        for size in slow_start_batches(len(nodes)):
            batch, pending = pending[:size], pending[size:]
            results = await asyncio.gather(
                *(self.pod_control.create(ds, daemon_pod(ds, n, digest)) for n in batch),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, BaseException)]
            self.expectations.lower(key, adds=len(errors))
            if errors:
                self.expectations.lower(key, adds=len(pending))
                first = errors[0]
                if isinstance(first, ApiError) and first.forbidden and "being terminated" in first.message:
                    return []
                return errors
        return []

    # --- history -------------------------------------------------------------------------------------

    async def _history(self, ds: Obj) -> str | None:
        """The current template's revision hash, its revision made or renumbered to be the newest."""
        owned = list(self.revisions.by_index("controller", meta(ds)["uid"]))
        top = max((history.revision_number(r) for r in owned), default=0)
        current = [r for r in owned if history.matches(ds, r)]
        if current:
            newest = max(current, key=history.revision_number)
            if history.revision_number(newest) < top:
                body = copy.deepcopy(newest)
                body["revision"] = top + 1
                await self.client.replace(revisions_path(meta(ds)["namespace"], meta(newest)["name"]), body)
            return (meta(newest).get("labels") or {}).get(history.HASH_LABEL) or history.template_hash(ds)
        revision = history.new_revision(ds, top + 1)
        try:
            await self.client.create(revisions_path(meta(ds)["namespace"]), revision)
        except ApiError as err:
            if not err.already_exists:
                raise
            existing = await self.client.get(
                revisions_path(meta(ds)["namespace"], revision["metadata"]["name"])
            )
            if (controller_ref(existing) or {}).get("uid") == meta(ds)["uid"] and history.matches(
                ds, existing
            ):
                return history.template_hash(ds)
            # Someone else's revision, or another template, under our name: count the collision.
            status = copy.deepcopy(ds.get("status") or {})
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            await self._write_status(ds, status, force=True)
            return None
        return history.template_hash(ds)

    async def _clean_history(self, ds: Obj, pods: list[Obj], digest: str) -> None:
        limit = int(
            (ds.get("spec") or {}).get("revisionHistoryLimit")
            if (ds.get("spec") or {}).get("revisionHistoryLimit") is not None
            else 10
        )
        owned = list(self.revisions.by_index("controller", meta(ds)["uid"]))
        in_use = {(meta(p).get("labels") or {}).get(history.HASH_LABEL, "") for p in pods}
        in_use.add(digest)
        current = f"{meta(ds)['name']}-{digest}"
        for revision in history.to_delete(owned, in_use, current, limit):
            try:
                await self.client.delete(
                    revisions_path(meta(ds)["namespace"], meta(revision)["name"]),
                    {"preconditions": {"uid": meta(revision)["uid"]}},
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise

    # --- status --------------------------------------------------------------------------------------

    async def _write_status(self, ds: Obj, status: Obj, force: bool = False) -> None:
        if not force and status == (ds.get("status") or {}):
            return
        namespace, name = meta(ds)["namespace"], meta(ds)["name"]
        try:
            await self.client.replace(ds_path(namespace, name) + "/status", {**ds, "status": status})
        except ApiError as err:
            if err.not_found:
                return
            if not err.conflict:
                raise
            fresh = await self.client.get(ds_path(namespace, name))
            await self.client.replace(ds_path(namespace, name) + "/status", {**fresh, "status": status})
