"""List, then watch: a local cache of one resource kept current by a single watch stream.

The informer lists (in pages), remembers the list's resourceVersion and watches from it with bookmarks,
so the server can move our resourceVersion forward even when nothing we select changes. When a watch
ends or the connection drops it resumes from the last resourceVersion seen; when the server answers
410 Gone (that version was compacted away) it lists again and reports the difference as events, so
handlers never miss a deletion that happened while we were away.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from agent.kube.backoff import Backoff
from agent.kube.client import ApiError, KubeClient

log = logging.getLogger("agent.kube.informer")

Obj = dict[str, Any]
# handler(event_type, new_or_last_object); event_type is ADDED, MODIFIED or DELETED.
Handler = Callable[[str, Obj], None]


def uid_of(obj: Obj) -> str:
    return obj.get("metadata", {}).get("uid", "")


class Informer:
    def __init__(
        self,
        client: KubeClient,
        path: str,
        handler: Handler,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
    ) -> None:
        self.client = client
        self.path = path
        self.handler = handler
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.cache: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0

    def get(self, uid: str) -> Obj | None:
        return self.cache.get(uid)

    def _selectors(self) -> dict[str, Any]:
        return {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}

    async def list(self) -> None:
        """List everything selected and reconcile the cache with it, emitting the differences."""
        items: list[Obj] = []
        cont: str | None = None
        while True:
            page = await self.client.get(
                self.path, limit=self.page_size, **{"continue": cont}, **self._selectors()
            )
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                self.resource_version = meta.get("resourceVersion", "")
                break
        self.relists += 1
        fresh = {uid_of(o): o for o in items}
        for uid, old in list(self.cache.items()):
            if uid not in fresh:
                del self.cache[uid]
                self._emit("DELETED", old)
        for uid, obj in fresh.items():
            old = self.cache.get(uid)
            self.cache[uid] = obj
            if old is None:
                self._emit("ADDED", obj)
            elif _rv(old) != _rv(obj):
                self._emit("MODIFIED", obj)
        self.synced.set()

    def _emit(self, kind: str, obj: Obj) -> None:
        try:
            self.handler(kind, obj)
        except Exception:
            log.exception("informer handler failed path=%s event=%s", self.path, kind)

    def _apply(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = _rv(obj)
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        if rv:
            self.resource_version = rv
        uid = uid_of(obj)
        if kind == "DELETED":
            self.cache.pop(uid, None)
        else:
            self.cache[uid] = obj
        self._emit(kind, obj)

    async def watch_once(self) -> None:
        """One watch request from our resourceVersion until the server closes it."""
        params = {
            **self._selectors(),
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": random.randint(*self.watch_timeout),
        }
        async for event in self.client.watch(self.path, params):
            self._apply(event)

    async def run(self) -> None:
        """List and watch forever (until cancelled), healing every failure."""
        backoff = Backoff(initial=0.5, maximum=30.0)
        need_list = True
        while True:
            try:
                if need_list:
                    await self.list()
                    need_list = False
                await self.watch_once()
                backoff.reset()
            except ApiError as err:
                if err.gone:
                    log.info("watch expired, relisting path=%s rv=%s", self.path, self.resource_version)
                    need_list = True
                    continue
                delay = backoff.next()
                log.warning("watch failed path=%s error=%r retry_in=%.1fs", self.path, str(err), delay)
                await asyncio.sleep(delay)
            except (ValueError, KeyError, TypeError) as err:
                # A malformed answer: start over from a fresh list rather than trust the cache.
                need_list = True
                delay = backoff.next()
                log.warning("watch answer unusable path=%s error=%r retry_in=%.1fs", self.path, str(err), delay)
                await asyncio.sleep(delay)


def _rv(obj: Obj) -> str:
    return obj.get("metadata", {}).get("resourceVersion", "")
