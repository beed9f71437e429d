"""The garbage collector controller: watches every kind that can own or be owned, keeps the ownership
graph, and deletes what has lost its owners, as upstream's attemptToDeleteItem and attemptToOrphan do.

- **Background** (the default): the owner is gone at once; each dependent whose every owner is gone is
  deleted (in turn taking its own dependents with it).
- **Foreground**: the owner stays with the `foregroundDeletion` finalizer until its dependents that
  block (ownerReference blockOwnerDeletion) are gone; then the collector removes the finalizer. A
  dependent with another live owner stays and loses its reference to the waiting one; a dependent that
  has dependents of its own goes in the foreground too, its references unblocked first when one of its
  dependents already waits (so an ownership cycle cannot hold itself forever).
- **Orphan**: the owner stays with the `orphan` finalizer until the collector has removed the owner's
  reference from every dependent; then the finalizer goes.

Owners are confirmed against the live API (never only the cache) before anything is deleted, and every
delete carries the dependent's UID as a precondition, so a name reused by a new object is never hit.
Kinds are found by discovery and looked at again every 30 s (new kinds are watched once served).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from controlplane.controllers.base import Controller, ControllerContext
from controlplane.controllers.garbagecollector.graph import FOREGROUND, ORPHAN, Graph, Identity, Node
from kubeclient.client import STRATEGIC_PATCH
from kubeclient.discovery import ApiResource, RestMapper, server_resources
from kubeclient.errors import ApiError
from kubeclient.eventwait import wait_event

log = logging.getLogger("controlplane.controllers.garbagecollector")

Obj = dict[str, Any]
# upstream's DefaultIgnoredResources: events own nothing and are owned by nothing.
IGNORED = {("", "events"), ("events.k8s.io", "events")}
REDISCOVERY_PERIOD = 30.0


class GarbageCollector(Controller):
    name = "garbage-collector"
    account = "generic-garbage-collector"
    workers = 20  # upstream's --concurrent-gc-syncs

    def __init__(self, ctx: ControllerContext) -> None:
        super().__init__(ctx)
        self.mapper = RestMapper([])
        self.graph = Graph(self._namespaced)
        self._watched: set[str] = set()

    def _namespaced(self, api_version: str, kind: str) -> bool:
        res = self.mapper.lookup(api_version, kind)
        return res.namespaced if res is not None else True

    # --- discovery and watches -----------------------------------------------------------------------

    async def _discover(self) -> None:
        resources = await server_resources(self.client)
        self.mapper = RestMapper(resources)
        for res in resources:
            if (res.group, res.plural) in IGNORED or not {"list", "watch", "delete"} <= res.verbs:
                continue
            path = res.collection()
            if path in self._watched:
                continue
            self._watched.add(path)
            informer = self.ctx.informers.get(path)
            informer.add_handler(
                on_add=self._observed,
                on_update=lambda _old, new: self._observed(new),
                on_delete=self._forgotten,
            )
            # A shared informer that has listed already (another controller's) gave its objects to the
            # handlers registered before; replay them for ours.
            for obj in informer.list():
                self._observed(obj)
        self.ctx.informers.start()

    def _observed(self, obj: Obj) -> None:
        self._schedule(self.graph.observe(obj))

    def _forgotten(self, obj: Obj) -> None:
        self._schedule(self.graph.forget(obj))

    def _schedule(self, work: list[tuple[str, str]]) -> None:
        for action, uid in work:
            self.queue.add(f"{action}|{uid}")

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self._discover()
                break
            except ApiError as err:
                log.warning("discovery failed error=%s", err)
                await _pause(stop, 2.0)
        await self.ctx.informers.wait_for_sync()
        rediscovery = asyncio.create_task(self._rediscover(stop))
        try:
            await super().run(stop)
        finally:
            rediscovery.cancel()

    async def _rediscover(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _pause(stop, REDISCOVERY_PERIOD)
            try:
                await self._discover()
            except ApiError as err:
                log.warning("rediscovery failed error=%s", err)

    # --- the work ------------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        action, _, uid = key.partition("|")
        node = self.graph.nodes.get(uid)
        if node is None:
            return
        if action == "orphan":
            await self._orphan_dependents(node)
        else:
            await self._attempt_delete(node)

    def _resource(self, identity: Identity) -> ApiResource | None:
        return self.mapper.lookup(identity.api_version, identity.kind)

    async def _live(self, identity: Identity) -> Obj | None:
        res = self._resource(identity)
        if res is None:
            return None
        try:
            return await self.client.get(res.path(identity.namespace, identity.name))
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def _attempt_delete(self, node: Node) -> None:
        if node.virtual:
            live = await self._live(node.identity)
            if live is None or (live.get("metadata") or {}).get("uid") != node.uid:
                self._schedule(self.graph.drop_virtual(node.uid))
            return
        latest = await self._live(node.identity)
        if latest is None or latest["metadata"].get("uid") != node.uid:
            return  # gone or replaced: the watch will tell
        meta = latest["metadata"]
        finalizers = meta.get("finalizers") or []
        if meta.get("deletionTimestamp") and FOREGROUND not in finalizers:
            return  # being deleted already, not waiting for anything of ours
        if meta.get("deletionTimestamp") and FOREGROUND in finalizers:
            await self._process_deleting_dependents(node, latest)
            return
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid")]
        if not refs:
            return
        solid, dangling, waiting = await self._classify(node, refs)
        if solid:
            # Not garbage. References to owners that are gone, and to owners waiting for their dependents
            # (which this one would otherwise hold forever), are removed.
            if dangling or waiting:
                await self._patch_owner_refs(latest, remove=dangling + waiting)
            return
        if waiting and node.dependents:
            # An owner waits for this one, which has dependents of its own: go foreground, so they go
            # first. A dependent waiting for its own dependents may close a cycle back to this one's
            # owners: this one's references stop blocking them first, as upstream's (loose) cycle check.
            if any(
                dep is not None and dep.deleting_dependents
                for dep in (self.graph.nodes.get(uid) for uid in node.dependents)
            ):
                blocking = [r["uid"] for r in refs if r.get("blockOwnerDeletion")]
                if blocking:
                    await self._patch_owner_refs(latest, unblock=blocking)
            await self._delete(node, latest, "Foreground")
            return
        policy = (
            "Orphan" if ORPHAN in finalizers else "Foreground" if FOREGROUND in finalizers else "Background"
        )
        await self._delete(node, latest, policy)

    async def _classify(self, node: Node, refs: list[Obj]) -> tuple[list[str], list[str], list[str]]:
        solid, dangling, waiting = [], [], []
        for ref in refs:
            uid = str(ref["uid"])
            owner = self.graph.nodes.get(uid)
            identity = owner.identity if owner is not None else None
            if identity is None:
                identity = Identity(
                    str(ref.get("apiVersion", "")),
                    str(ref.get("kind", "")),
                    node.identity.namespace
                    if self._namespaced(str(ref.get("apiVersion", "")), str(ref.get("kind", "")))
                    else "",
                    str(ref.get("name", "")),
                )
            live = await self._live(identity)
            if live is None or live["metadata"].get("uid") != uid:
                dangling.append(uid)
            elif live["metadata"].get("deletionTimestamp") and FOREGROUND in (
                live["metadata"].get("finalizers") or []
            ):
                waiting.append(uid)
            else:
                solid.append(uid)
        return solid, dangling, waiting

    async def _process_deleting_dependents(self, node: Node, latest: Obj) -> None:
        blocking = node.blocking_dependents(self.graph)
        if not blocking:
            await self._remove_finalizer(node, FOREGROUND)
            return
        for dep in blocking:
            if not dep.deleting_dependents:
                self.queue.add(f"delete|{dep.uid}")

    async def _orphan_dependents(self, owner: Node) -> None:
        for uid in list(owner.dependents):
            dep = self.graph.nodes.get(uid)
            if dep is None or dep.virtual:
                continue
            live = await self._live(dep.identity)
            if live is None or live["metadata"].get("uid") != uid:
                continue
            await self._patch_owner_refs(live, remove=[owner.uid])
        await self._remove_finalizer(owner, ORPHAN)

    # --- writes --------------------------------------------------------------------------------------

    async def _delete(self, node: Node, latest: Obj, policy: str) -> None:
        res = self._resource(node.identity)
        if res is None:
            return
        log.info(
            "deleting object=%s/%s kind=%s uid=%s propagation=%s",
            node.identity.namespace,
            node.identity.name,
            node.identity.kind,
            node.uid,
            policy,
        )
        try:
            await self.client.delete(
                res.path(node.identity.namespace, node.identity.name),
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "propagationPolicy": policy,
                    "preconditions": {"uid": node.uid},
                },
            )
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise

    async def _patch_owner_refs(
        self, obj: Obj, remove: list[str] | None = None, unblock: list[str] | None = None
    ) -> None:
        """Drop the references to `remove`, make those to `unblock` non-blocking (one patch, UID-guarded)."""
        remove, unblock = remove or [], unblock or []
        meta = obj["metadata"]
        res = self._resource(
            Identity(
                obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace") or "", meta["name"]
            )
        )
        if res is None:
            return
        refs: list[Obj] = [{"$patch": "delete", "uid": uid} for uid in remove]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid") in unblock:
                refs.append({**ref, "blockOwnerDeletion": False})
        try:
            await self.client.patch(
                res.path(meta.get("namespace") or "", meta["name"]),
                {"metadata": {"ownerReferences": refs, "uid": meta["uid"]}},
                content_type=STRATEGIC_PATCH,
            )
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise

    async def _remove_finalizer(self, node: Node, finalizer: str) -> None:
        res = self._resource(node.identity)
        if res is None:
            return
        path = res.path(node.identity.namespace, node.identity.name)
        for _ in range(5):
            try:
                live = await self.client.get(path)
            except ApiError as err:
                if err.not_found:
                    return
                raise
            meta = live["metadata"]
            if meta.get("uid") != node.uid or finalizer not in (meta.get("finalizers") or []):
                return
            meta["finalizers"] = [f for f in meta["finalizers"] if f != finalizer]
            try:
                await self.client.replace(path, live)
                return
            except ApiError as err:
                if err.not_found:
                    return
                if not err.conflict:
                    raise
        raise RuntimeError(f"could not remove finalizer {finalizer} from {path}: kept conflicting")


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        await wait_event(stop, seconds)
    except TimeoutError:
        pass
