"""Each API server's watcher of the CRD resource (upstream's naming, establishing, finalizing controllers
and the customresource handler's kind table, in one loop).

It follows the watch cache's CRD bucket (every server its own: with several servers each learns the
CRDs from its own store watch), and for each CRD, one at a time:
- accepts its names unless another CRD of the group has them (NamesAccepted, with upstream's reasons),
  then marks it Established;
- serves what is established: a Kind per served version, added to the kinds list (routes, discovery,
  OpenAPI follow it), replaced when the CRD changes, removed when it goes;
- once the CRD is marked for deletion, refuses new objects, deletes every object, then drops the
  cleanup finalizer, so the store removes the CRD.
Status writes are idempotent (a condition moves only when its status does), so several servers agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
from typing import Any

from controlplane.apiserver.aggregator import autoregister
from controlplane.apiserver.apiextensions import crd as crds
from controlplane.apiserver.apiextensions.resource import CustomResource, kinds_of
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.registry import Registry
from controlplane.storage.cache import CacheEvent

log = logging.getLogger("controlplane.apiextensions")
Obj = dict[str, Any]
_NAME_FIELDS = (
    ("plural", "PluralConflict"),
    ("singular", "SingularConflict"),
    ("kind", "KindConflict"),
    ("listKind", "ListKindConflict"),
)
RETRY = 1.0


def _taken(others: list[Obj]) -> dict[str, set[str]]:
    """Resource and kind names the other CRDs of a group have accepted."""
    resources: set[str] = set()
    kinds_: set[str] = set()
    for other in others:
        accepted = (other.get("status") or {}).get("acceptedNames") or {}
        resources |= {accepted.get("plural", ""), accepted.get("singular", "")} | set(
            accepted.get("shortNames") or []
        )
        kinds_ |= {accepted.get("kind", ""), accepted.get("listKind", "")}
    return {"resources": resources - {""}, "kinds": kinds_ - {""}}


def accept_names(crd: Obj, others: list[Obj], builtin: list[Kind]) -> tuple[Obj, str, str]:
    """Upstream's naming controller: (acceptedNames, reason, message); reason NoConflicts or the first
    conflict's. A conflicting name keeps what was accepted before."""
    wanted = (crd.get("spec") or {}).get("names") or {}
    old = (crd.get("status") or {}).get("acceptedNames") or {}
    taken = _taken(others)
    taken["resources"] |= {k.plural for k in builtin} | {k.singular for k in builtin}
    taken["kinds"] |= {k.kind for k in builtin} | {k.list_kind for k in builtin}
    accepted = dict(old)
    reason, message = "NoConflicts", "no conflicts found"
    for field, why in _NAME_FIELDS:
        value = wanted.get(field, "")
        pool = taken["kinds"] if field in ("kind", "listKind") else taken["resources"]
        if value and value in pool:
            if reason == "NoConflicts":
                reason, message = why, f'"{value}" is already in use'
            continue
        accepted[field] = value
    short = list(wanted.get("shortNames") or [])
    clash = [s for s in short if s in taken["resources"]]
    if clash:
        if reason == "NoConflicts":
            reason, message = "ShortNamesConflict", f'"{clash[0]}" is already in use'
    elif short:
        accepted["shortNames"] = short
    else:
        accepted.pop("shortNames", None)
    if wanted.get("categories"):
        accepted["categories"] = list(wanted["categories"])
    else:
        accepted.pop("categories", None)
    return accepted, reason, message


class CrdController:
    """Started by the CRD kind (Kind.controllers); one per API server."""

    def __init__(self, registry: Registry, kind: Kind) -> None:
        self.registry = registry
        self.kind = kind
        self.served: dict[str, tuple[str, list[CustomResource]]] = {}  # CRD name -> (resourceVersion, kinds)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pending: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Serve what is established now (before the server answers), then follow the CRD bucket."""
        current = self.registry.cache.subscribe(self.kind.bucket, self._changed)
        for cached in current:
            obj = cached.obj
            if crds.is_true(obj, crds.ESTABLISHED):
                try:
                    self._serve(obj, str(cached.revision))
                except (KeyError, IndexError, TypeError, ValueError):  # a stored CRD we cannot serve
                    log.exception("crd=%s step=serve", obj["metadata"].get("name"))
            self._enqueue(obj["metadata"]["name"])
        self._task = asyncio.create_task(self._run(), name="crd-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for name in list(self.served):
            self._unserve(name)

    def _changed(self, event: CacheEvent) -> None:
        name = event.obj.view["metadata"]["name"]
        if event.type == "DELETED":
            self._unserve(name)
        self._enqueue(name)
        # Another CRD of the group may now get the names this one held or wanted.
        for other in self.registry.cache.list(self.kind.bucket, self.kind.prefix("")):
            other_name = other.view["metadata"]["name"]
            if other_name != name and not crds.is_true(other.obj, crds.NAMES_ACCEPTED):
                self._enqueue(other_name)

    def _enqueue(self, name: str) -> None:
        if name not in self._pending:
            self._pending.add(name)
            self._queue.put_nowait(name)

    async def _run(self) -> None:
        while True:
            name = await self._queue.get()
            self._pending.discard(name)
            try:
                await self._sync(name)
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                log.warning("crd=%s step=sync error=%s", name, err.message)
                self._retry(name)
            except Exception:
                log.exception("crd=%s step=sync", name)
                self._retry(name)

    def _retry(self, name: str) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(RETRY, self._enqueue, name)

    # --- one CRD -------------------------------------------------------------------------------------

    async def _sync(self, name: str) -> None:
        cached = self.registry.cache.get(self.kind.key("", name))
        if cached is None:
            self._unserve(name)
            await self._register_apiservices()
            return
        obj = cached.obj
        if obj["metadata"].get("deletionTimestamp"):
            await self._finalize(obj)
            return
        await self._update_status(obj)
        fresh = self.registry.cache.get(self.kind.key("", name))
        if fresh is not None and crds.is_true(fresh.obj, crds.ESTABLISHED):
            self._serve(fresh.obj, str(fresh.revision))
        await self._register_apiservices()

    async def _register_apiservices(self) -> None:
        """upstream's crdRegistrationController: a local APIService for every served version of every
        CRD, none left for a group/version no CRD serves."""
        served = [
            (spec.get("group", ""), v.get("name", ""))
            for c in self.registry.cache.list(self.kind.bucket, self.kind.prefix(""))
            for spec in [c.obj.get("spec") or {}]
            for v in spec.get("versions") or []
            if v.get("served")
        ]
        await autoregister.sync_crds(self.registry, served)

    async def _update_status(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        group = obj["spec"]["group"]
        others = [
            c.obj
            for c in self.registry.cache.list(self.kind.bucket, self.kind.prefix(""))
            if c.view["metadata"]["name"] != name
        ]
        others = [o for o in others if (o.get("spec") or {}).get("group") == group]
        builtin = [k for k in self.registry.kinds if k.group == group and not isinstance(k, CustomResource)]
        accepted, reason, message = accept_names(obj, others, builtin)

        def mutate(current: Obj) -> Obj:
            status = current.setdefault("status", {})
            status["acceptedNames"] = accepted
            ok = reason == "NoConflicts"
            crds.set_condition(status, crds.NAMES_ACCEPTED, "True" if ok else "False", reason, message)
            if ok:
                crds.set_condition(
                    status,
                    crds.ESTABLISHED,
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                )
            elif not crds.is_true(current, crds.ESTABLISHED):
                crds.set_condition(
                    status, crds.ESTABLISHED, "False", "NotAccepted", "not all names are accepted"
                )
            return current

        before = copy.deepcopy(obj.get("status"))
        after = mutate(copy.deepcopy(obj)).get("status")
        if json.dumps(before, sort_keys=True) != json.dumps(after, sort_keys=True):
            await self.registry.guaranteed_update(self.kind, "", name, mutate, "status")

    # --- serving -------------------------------------------------------------------------------------

    def _serve(self, obj: Obj, revision: str) -> None:
        name = obj["metadata"]["name"]
        served = self.served.get(name)
        if served is not None and served[0] == revision:
            return
        self._unserve(name)
        new = kinds_of(obj)
        for k in new:
            self.registry.kinds.add(k)
        self.served[name] = (revision, new)
        log.info("event=crd-serving crd=%s versions=%s", name, ",".join(k.version for k in new))

    def _unserve(self, name: str) -> None:
        served = self.served.pop(name, None)
        if served is None:
            return
        for k in served[1]:
            self.registry.kinds.remove(k)
            if not any(k.schema == other.schema for _, ks in self.served.values() for other in ks):
                k.forget()

    # --- deletion ------------------------------------------------------------------------------------

    async def _finalize(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        served = self.served.get(name)
        if served is not None:
            for k in served[1]:
                k.terminating = True
        if crds.CLEANUP_FINALIZER not in (obj["metadata"].get("finalizers") or []):
            return
        await self._set_terminating(
            name, "InstanceDeletionInProgress", "CustomResource deletion is in progress"
        )
        resource = served[1][0] if served and served[1] else self._any_kind(obj)
        if resource is not None:
            await self.registry.cache.wait_fresh()
            items = self.registry.cache.list(resource.bucket, resource.prefix(""))
            for cached in items:
                meta = cached.view["metadata"]
                if meta.get("deletionTimestamp"):
                    continue
                with contextlib.suppress(ApiError):
                    await self.registry.delete(
                        resource, meta.get("namespace", ""), meta["name"], DeleteOptions()
                    )
            if self.registry.cache.list(resource.bucket, resource.prefix("")):
                self._retry(name)  # objects held by their own finalizers: look again
                return

        def drop(current: Obj) -> Obj:
            meta = current["metadata"]
            meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != crds.CLEANUP_FINALIZER]
            crds.set_condition(
                current.setdefault("status", {}),
                crds.TERMINATING,
                "False",
                "InstanceDeletionCompleted",
                "removed all instances",
            )
            return current

        with contextlib.suppress(ApiError):
            await self.registry.guaranteed_update(self.kind, "", name, drop)

    async def _set_terminating(self, name: str, reason: str, message: str) -> None:
        def mutate(current: Obj) -> Obj:
            crds.set_condition(current.setdefault("status", {}), crds.TERMINATING, "True", reason, message)
            return current

        with contextlib.suppress(ApiError):
            await self.registry.guaranteed_update(self.kind, "", name, mutate, "status")

    @staticmethod
    def _any_kind(obj: Obj) -> CustomResource | None:
        """A kind for a CRD never served here (deleted before it was established): its storage bucket."""
        try:
            found = kinds_of(obj)
        except (KeyError, IndexError, TypeError):
            return None
        for k in found:
            k.forget()
        return found[0] if found else None


__all__ = ["CrdController", "accept_names"]
