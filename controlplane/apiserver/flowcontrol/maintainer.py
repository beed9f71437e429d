"""The API server's keeper of the priority-and-fairness configuration objects (upstream's APF
config-producer, pkg/registry/flowcontrol/ensurer, and the Dangling condition its config controller
writes).

At start and whenever a FlowSchema or PriorityLevelConfiguration changes (and once a minute, as
upstream polls), it:
- creates every mandatory and suggested object that is missing (a deleted one comes back);
- resets the spec of a mandatory object that differs, and of a suggested object whose
  `apf.kubernetes.io/autoupdate-spec` annotation is true (absent or unparsable: only if the object was
  never changed, metadata.generation 1, and then the annotation is written);
- deletes objects that are neither mandatory nor suggested but carry the annotation as true;
- keeps each FlowSchema's `Dangling` condition (True when its priority level does not exist), which
  kubectl prints as MISSINGPL.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from typing import TYPE_CHECKING, Any

from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.flowcontrol import defaults
from controlplane.apiserver.meta import timestamp
from controlplane.apiserver.options import DeleteOptions
from controlplane.storage import StoreError
from kubeclient.eventwait import wait_event

if TYPE_CHECKING:
    from controlplane.apiserver.kinds.base import Kind
    from controlplane.apiserver.kinds.ports import Registry
    from controlplane.storage.cache import CacheEvent

log = logging.getLogger("controlplane.apiserver.flowcontrol")

Obj = dict[str, Any]
INTERVAL = 60.0


def fresh(obj: Obj) -> Obj:
    """A bootstrap object to create (a deep copy: the registry fills in its metadata)."""
    return copy.deepcopy(obj)


def _autoupdate(obj: Obj) -> tuple[bool, bool]:
    """(maintain the spec?, write the annotation?) for a suggested object (upstream's shouldUpdateSpec)."""
    meta = obj.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(defaults.AUTOUPDATE)
    if value is not None and value.lower() in ("true", "1", "t"):
        return True, False
    if value is not None and value.lower() in ("false", "0", "f"):
        return False, False
    return meta.get("generation") == 1, meta.get("generation") == 1


def dangling_condition(level: str, exists: bool, previous: Obj | None) -> Obj:
    status = "False" if exists else "True"
    if previous is not None and previous.get("status") == status:
        return previous
    if exists:
        reason = "Found"
        message = (
            f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" and it exists'
        )
    else:
        reason = "NotFound"
        message = (
            f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" but there is no '
            "such object"
        )
    return {
        "type": "Dangling",
        "status": status,
        "lastTransitionTime": timestamp(),
        "reason": reason,
        "message": message,
    }


class Maintainer:
    def __init__(self, registry: Registry, schemas: Kind, levels: Kind, interval: float = INTERVAL) -> None:
        self.registry = registry
        self.schemas = schemas
        self.levels = levels
        self.interval = interval
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        for kind in (self.schemas, self.levels):
            self.registry.cache.subscribe(kind.bucket, self._changed)
        self._task = asyncio.create_task(self._run(), name="apf-maintainer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _changed(self, event: CacheEvent) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.reconcile()
            except (ApiError, StoreError) as err:  # a conflict or the store away: the next round
                log.warning("event=apf-maintenance-failed cause=%s", err)
            except Exception:
                log.exception("event=apf-maintenance-failed")
            with contextlib.suppress(TimeoutError):
                await wait_event(self._wake, self.interval)

    async def reconcile(self) -> None:
        for kind in (self.levels, self.schemas):
            await self._ensure(kind)
        await self._dangling()

    def _current(self, kind: Kind) -> dict[str, Obj]:
        return {
            c.obj["metadata"]["name"]: c.obj for c in self.registry.cache.list(kind.bucket, kind.prefix(""))
        }

    async def _ensure(self, kind: Kind) -> None:
        current = self._current(kind)
        mandatory = {o["metadata"]["name"] for o in defaults.mandatory(kind.plural)}
        wanted = (*defaults.mandatory(kind.plural), *defaults.suggested(kind.plural))
        for desired in wanted:
            name = desired["metadata"]["name"]
            have = current.get(name)
            if have is None:
                await self._write(self.registry.create(kind, "", fresh(desired)))
                continue
            update, annotate = (True, False) if name in mandatory else _autoupdate(have)
            if not update or (have.get("spec") == desired["spec"] and not annotate):
                continue
            body = copy.deepcopy(have)
            body["spec"] = copy.deepcopy(desired["spec"])
            body["metadata"].setdefault("annotations", {})[defaults.AUTOUPDATE] = "true"
            await self._write(self.registry.update(kind, "", name, body))
        names = {o["metadata"]["name"] for o in wanted}
        for name, have in current.items():
            value = ((have.get("metadata") or {}).get("annotations") or {}).get(defaults.AUTOUPDATE, "")
            if name not in names and value.lower() in ("true", "1", "t"):
                uid = have["metadata"].get("uid")
                await self._write(self.registry.delete(kind, "", name, DeleteOptions(uid=uid)))

    async def _dangling(self) -> None:
        levels = self._current(self.levels)
        for name, schema in self._current(self.schemas).items():
            level = ((schema.get("spec") or {}).get("priorityLevelConfiguration") or {}).get("name", "")
            conditions = list((schema.get("status") or {}).get("conditions") or [])
            previous = next((c for c in conditions if c.get("type") == "Dangling"), None)
            condition = dangling_condition(level, level in levels, previous)
            if condition is previous:
                continue
            body = copy.deepcopy(schema)
            body["status"] = {
                "conditions": [c for c in conditions if c.get("type") != "Dangling"] + [condition]
            }
            await self._write(self.registry.update(self.schemas, "", name, body, subresource="status"))

    async def _write(self, call: Any) -> None:
        try:
            await call
        except ApiError as err:
            if err.code not in (404, 409):  # raced with a user's write: the event brings us back
                raise
