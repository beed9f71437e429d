"""List, then watch from the list's resourceVersion; relist when the server says 410 Gone.

The informer keeps the last object per key so a relist can be turned into the events the handler
missed (added, changed, and deleted-while-we-were-away), and so handlers get the old object on update.
Bookmarks only move the resourceVersion forward. Any other failure is retried after a short, growing
pause, resuming from the last resourceVersion seen.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from controlplane.scheduler.client import ApiClient, ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class Gone(Exception):
    """The resourceVersion we watch from was compacted away."""


class Informer:
    def __init__(
        self,
        client: ApiClient,
        path: str,
        on_add: Callable[[Obj], None],
        on_update: Callable[[Obj, Obj], None],
        on_delete: Callable[[Obj], None],
        field_selector: str | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete
        self.field_selector = field_selector
        self.store: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0  # how many times it listed (1 + relists), for logs and tests

    async def run(self) -> None:
        """Keep the store in step with the server until cancelled. Run again after a cancel, it
        resumes watching from where it stopped (and relists if that is too old by now)."""
        failures = 0
        need_list = not self.resource_version
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                await self._watch()
                failures = 0
            except Gone:
                log.info("watch expired, relisting path=%s rv=%s", self.path, self.resource_version)
                need_list = True
            except asyncio.CancelledError:
                raise
            except (TimeoutError, ApiError, OSError, ValueError) as err:
                failures += 1
                if isinstance(err, ApiError) and err.status == 410:
                    need_list = True
                delay = min(0.2 * 2 ** min(failures, 6), 10.0) * random.uniform(0.8, 1.2)
                log.warning("watch failed path=%s error=%s retry_in=%.1fs", self.path, err, delay)
                await asyncio.sleep(delay)
            except Exception as err:  # aiohttp's ClientError and friends
                failures += 1
                delay = min(0.2 * 2 ** min(failures, 6), 10.0)
                log.warning("watch failed path=%s error=%r retry_in=%.1fs", self.path, err, delay)
                await asyncio.sleep(delay)

    def _call(self, handler: Callable[..., None], *objs: Obj) -> None:
        """A handler that fails on one object (say, a quantity it cannot parse) must not stop the
        watch, or the same event would be replayed and fail forever."""
        try:
            handler(*objs)
        except Exception:
            log.exception("handler failed path=%s object=%s", self.path, _key(objs[-1]))

    def _params(self) -> dict[str, Any]:
        return {"fieldSelector": self.field_selector} if self.field_selector else {}

    async def _relist(self) -> None:
        items, rv = await self.client.list(self.path, self._params())
        self.lists += 1
        fresh = {_key(o): o for o in items}
        for key in [k for k in self.store if k not in fresh]:
            self._call(self.on_delete, self.store.pop(key))
        for key, obj in fresh.items():
            old = self.store.get(key)
            self.store[key] = obj
            if old is None:
                self._call(self.on_add, obj)
            elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._call(self.on_update, old, obj)
        self.resource_version = rv
        self.synced.set()

    async def _watch(self) -> None:
        params = {**self._params(), "resourceVersion": self.resource_version,
                  "timeoutSeconds": random.randint(240, 360)}
        try:
            async for event in self.client.watch(self.path, params):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ApiError(int(obj.get("code") or 500), obj, f"WATCH {self.path}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self.resource_version = str(rv)
                if kind == "BOOKMARK":
                    continue
                key = _key(obj)
                if kind == "DELETED":
                    self.store.pop(key, None)
                    self._call(self.on_delete, obj)
                elif kind in ("ADDED", "MODIFIED"):
                    old = self.store.get(key)
                    self.store[key] = obj
                    if old is None:
                        self._call(self.on_add, obj)
                    else:
                        self._call(self.on_update, old, obj)
        except ApiError as err:
            if err.status == 410:
                raise Gone() from err
            raise
