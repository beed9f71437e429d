"""List, then watch: a local cache of one resource kept current by a single watch stream, with indexes
and event handlers, as client-go's shared informer (reflector + indexer + processor).

The informer lists in pages, remembers the list's resourceVersion and watches from it with bookmarks,
so the server can move the resourceVersion forward even when nothing selected changes. When a watch
ends or the connection drops it resumes from the last resourceVersion seen; when the server answers 410
Gone (that version was compacted away) it lists again and reports the difference as events, so handlers
never miss a deletion that happened while the informer was away (the last known object is passed, as
client-go passes DeletedFinalStateUnknown). A relist that finds a name now held by another object (a new
UID) reports the old one deleted and the new one added.

Objects are keyed `namespace/name` (`name` for cluster-scoped ones), as client-go's MetaNamespaceKeyFunc.
Indexes (`indexers={"namespace": by_namespace}`) answer "which pods does this ReplicaSet own" without a
scan. A resync period re-delivers every cached object as an update (old is new), which level-triggered
controllers use to heal what a missed event or a failed sync left behind. A handler that raises is logged
and does not stop the informer (or the next handler).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger("kubeclient.informer")

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], Iterable[str]]


def meta(obj: Obj) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def key_of(obj: Obj) -> str:
    """`namespace/name`, or `name` for a cluster-scoped object."""
    m = meta(obj)
    ns = m.get("namespace") or ""
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))


def split_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a key; namespace is "" for cluster-scoped objects."""
    ns, _, name = key.rpartition("/")
    return ns, name


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid", ""))


def resource_version(obj: Obj) -> str:
    return str(meta(obj).get("resourceVersion", ""))


# Indexers for the lookups every controller needs.
def by_namespace(obj: Obj) -> list[str]:
    return [str(meta(obj).get("namespace", ""))]


def by_uid(obj: Obj) -> list[str]:
    return [uid_of(obj)]


def by_node_name(obj: Obj) -> list[str]:
    node = (obj.get("spec") or {}).get("nodeName")
    return [node] if node else []


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    """The ownerReference with controller=true, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def by_controller_uid(obj: Obj) -> list[str]:
    ref = controller_ref(obj)
    return [str(ref.get("uid", ""))] if ref else []


def drop_managed_fields(obj: Obj) -> Obj:
    """A transform for informers whose owner never reads field ownership (upstream's controller manager
    and scheduler trim it the same way, "for memory efficiency"): a pod's managedFields, one entry per
    writer with its field tree, are a large share of the pod, kept for every cached pod and decoded
    again into every copy a controller makes."""
    m = obj.get("metadata")
    if isinstance(m, dict):
        m.pop("managedFields", None)
    return obj


@dataclass
class Handler:
    on_add: Callable[[Obj], None] | None = None
    on_update: Callable[[Obj, Obj], None] | None = None
    on_delete: Callable[[Obj], None] | None = None


_HANDLER_ATTRIBUTES = {"add": "on_add", "update": "on_update", "delete": "on_delete"}


class Informer:
    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        resync_period: float = 0.0,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        transform: Callable[[Obj], Obj] | None = None,
    ) -> None:
        self.client = client
        self.path = path
        # Applied to each object as it arrives (list or watch), before it is cached or handed to a
        # handler (client-go's TransformFunc); it may change the freshly decoded object in place.
        self.transform = transform
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.resync_period = resync_period
        self.store: dict[str, Obj] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.lists = 0  # how many times it listed (1 + relists), for logs and tests
        self._handlers: list[Handler] = []
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    # --- handlers and reads --------------------------------------------------------------------------

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """More indexes on a shared informer (controllers add theirs before the factory starts it);
        objects already cached are indexed at once."""
        for name, fn in indexers.items():
            if name in self._indexers:
                continue
            self._indexers[name] = fn
            index: dict[str, set[str]] = {}
            for key, obj in self.store.items():
                for value in fn(obj):
                    index.setdefault(value, set()).add(key)
            self._indices[name] = index

    def add_handler(
        self,
        on_add: Callable[[Obj], None] | None = None,
        on_update: Callable[[Obj, Obj], None] | None = None,
        on_delete: Callable[[Obj], None] | None = None,
    ) -> None:
        """Handlers added before `run` see every object as an add once the first list is in."""
        self._handlers.append(Handler(on_add, on_update, on_delete))

    def get(self, key: str) -> Obj | None:
        return self.store.get(key)

    def list(self) -> list[Obj]:
        return list(self.store.values())

    def by_index(self, index: str, value: str) -> list[Obj]:
        keys = self._indices[index].get(value, ())
        return [self.store[k] for k in keys if k in self.store]

    def index_keys(self, index: str, value: str) -> set[str]:
        return set(self._indices[index].get(value, ()))

    def index_values(self, index: str) -> list[str]:
        """Every value the index holds at least one object under (client-go's ListIndexFuncValues)."""
        return list(self._indices[index])

    # --- the cache -----------------------------------------------------------------------------------

    def _index(self, key: str, old: Obj | None, new: Obj | None) -> None:
        for name, fn in self._indexers.items():
            before = fn(old) if old is not None else ()
            after = fn(new) if new is not None else ()
            if before == after:
                continue  # most updates (a status change) keep every index value: nothing to move
            index = self._indices[name]
            for value in before:
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in after:
                index.setdefault(value, set()).add(key)

    def _put(self, key: str, obj: Obj) -> Obj | None:
        old = self.store.get(key)
        self.store[key] = obj
        self._index(key, old, obj)
        return old

    def _drop(self, key: str) -> Obj | None:
        old = self.store.pop(key, None)
        if old is not None:
            self._index(key, old, None)
        return old

    def _emit(self, kind: str, *objs: Obj) -> None:
        attribute = _HANDLER_ATTRIBUTES[kind]
        for handler in self._handlers:
            fn = getattr(handler, attribute)
            if fn is None:
                continue
            try:
                fn(*objs)
            except Exception:
                log.exception(
                    "informer handler failed path=%s event=%s object=%s", self.path, kind, key_of(objs[-1])
                )

    def _selectors(self) -> dict[str, Any]:
        return {"fieldSelector": self.field_selector, "labelSelector": self.label_selector}

    async def relist(self) -> None:
        """List everything selected and reconcile the cache with it, emitting the differences."""
        items, rv = await self.client.list(self.path, self._selectors(), self.page_size)
        self.lists += 1
        if self.transform is not None:
            items = [self.transform(o) for o in items]
        fresh = {key_of(o): o for o in items}
        for key in [k for k in self.store if k not in fresh]:
            old = self._drop(key)
            if old is not None:
                self._emit("delete", old)
        for key, obj in fresh.items():
            old = self._put(key, obj)
            if old is None:
                self._emit("add", obj)
            elif uid_of(old) != uid_of(obj):
                self._emit("delete", old)
                self._emit("add", obj)
            elif resource_version(old) != resource_version(obj):
                self._emit("update", old, obj)
        self.resource_version = rv
        self.synced.set()

    def _apply(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event {kind} without an object")
        rv = resource_version(obj)
        if rv:
            self.resource_version = rv
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only the resourceVersion moves
        if self.transform is not None:
            obj = self.transform(obj)
        key = key_of(obj)
        if kind == "DELETED":
            self._drop(key)
            self._emit("delete", obj)
            return
        old = self._put(key, obj)
        if old is None:
            self._emit("add", obj)
        else:
            self._emit("update", old, obj)

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

    def resync(self) -> None:
        """Deliver every cached object to the update handlers again (old is new)."""
        for obj in list(self.store.values()):
            self._emit("update", obj, obj)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_period)
            self.resync()

    async def run(self) -> None:
        """List and watch forever (until cancelled), healing every failure. Run again after a cancel,
        it resumes watching from where it stopped (and relists if that is too old by now)."""
        resyncer = asyncio.create_task(self._resync_loop()) if self.resync_period > 0 else None
        backoff = Backoff(initial=0.5, maximum=30.0)
        need_list = not self.resource_version
        try:
            while True:
                try:
                    if need_list:
                        await self.relist()
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
                    log.warning(
                        "watch answer unusable path=%s error=%r retry_in=%.1fs", self.path, str(err), delay
                    )
                    await asyncio.sleep(delay)
        finally:
            if resyncer is not None:
                resyncer.cancel()
