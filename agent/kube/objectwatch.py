"""Per-object watches of the ConfigMaps and Secrets the node's pods name, as upstream's kubelet serves
them with `configMapAndSecretChangeDetectionStrategy: Watch` (its default): the first pod naming an
object starts a list-then-watch of that one object (`fieldSelector=metadata.name=<name>`, which the Node
authorizer judges as a read of the object itself), and the last pod to stop naming it stops the watch and
drops the copy. Once the watch's first list is in, reads are answered from its store, so the pod workers'
passes (each mount, each periodic volume refresh, each container's env) cost the API nothing, and a
change to the object is in the store as soon as the watch delivers it.

An object marked immutable is watched no further once read (it cannot change; its copy stays), as
upstream stops its reflector then. A watch that fails or expires (410) lists again after a jittered
backoff that grows to 30 s, whatever the failure, as client-go's reflector restarts its list-and-watch
under a backoff manager: a server that keeps refusing or expiring sees a request every few seconds at
most, never a tight loop. While the API is unreachable the store keeps the last state seen. Secrets are
held in memory only and their contents never logged."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import Informer

log = logging.getLogger("agent.kube.objectwatch")

Key = tuple[str, str, str]  # (kind, namespace, name)
Obj = dict[str, Any]

# The kinds served from watches, and their collections.
WATCHED = {"ConfigMap": "configmaps", "Secret": "secrets"}
# Backoff before a watch is tried again after a failure, an expiry, or an end that came too early.
RETRY_INITIAL, RETRY_MAX = 0.8, 30.0
# A watch the server ended after this long was healthy: the next one starts at once, the backoff afresh.
HEALTHY_WATCH_SECONDS = 30.0


@dataclass
class ObjectWatch:
    """One object's list-then-watch: its store (the informer's) and the task keeping it current."""

    key: Key
    informer: Informer
    task: asyncio.Task[None] | None = None
    immutable: bool = False  # seen immutable: no longer watched, the copy serves for good

    @property
    def synced(self) -> bool:
        return self.informer.synced.is_set()

    def current(self) -> Obj | None:
        _, namespace, name = self.key
        return self.informer.get(f"{namespace}/{name}")


class ObjectWatches:
    """The watches of the objects named by the node's pods, started and stopped by the reader's
    reference counts (`start` on the first pod, `stop` after the last)."""

    def __init__(self, client: KubeClient, retry: tuple[float, float] = (RETRY_INITIAL, RETRY_MAX)) -> None:
        self.client = client
        self.retry = retry
        self._watches: dict[Key, ObjectWatch] = {}

    def start(self, key: Key) -> None:
        """Watch the object from now on (called from the event loop)."""
        kind, namespace, name = key
        if kind not in WATCHED or key in self._watches:
            return
        informer = Informer(
            self.client,
            f"/api/v1/namespaces/{quote(namespace)}/{WATCHED[kind]}",
            field_selector=f"metadata.name={name}",
        )
        watch = ObjectWatch(key, informer)
        watch.task = asyncio.get_running_loop().create_task(
            self._run(watch), name=f"watch {kind} {namespace}/{name}"
        )
        watch.task.add_done_callback(_report_death)
        self._watches[key] = watch

    def stop(self, key: Key) -> None:
        """No pod names the object any more: its watch ends and its copy goes."""
        watch = self._watches.pop(key, None)
        if watch is not None and watch.task is not None:
            watch.task.cancel()

    def read(self, key: Key) -> tuple[bool, Obj | None]:
        """(True, the object or None if it does not exist) once the object's watch has listed it;
        (False, None) while it has not, or the object is not watched: the caller asks the API."""
        watch = self._watches.get(key)
        if watch is None or not watch.synced:
            return False, None
        obj = watch.current()
        if obj is not None and obj.get("immutable") is True and not watch.immutable:
            watch.immutable = True
            if watch.task is not None:
                watch.task.cancel()
            log.debug("object is immutable, no longer watched kind=%s namespace=%s name=%s", *key)
        return True, obj

    def held(self) -> set[Key]:
        """The objects a watch has a copy of."""
        return {key for key, watch in self._watches.items() if watch.synced}

    def watching(self) -> set[Key]:
        """The objects whose watch runs now (not stopped as immutable)."""
        return {key for key, w in self._watches.items() if w.task is not None and not w.task.done()}

    async def close(self) -> None:
        tasks = [w.task for w in self._watches.values() if w.task is not None]
        self._watches.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, watch: ObjectWatch) -> None:
        """List, then watch from the list's resourceVersion, for as long as a pod names the object."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(initial=self.retry[0], maximum=self.retry[1])
        informer = watch.informer
        need_list = True
        while True:
            began = loop.time()
            try:
                if need_list:
                    await informer.relist()
                    need_list = False
                await informer.watch_once()
            except ApiError as err:
                need_list = need_list or err.gone
                why = "watch expired" if err.gone else f"watch failed: {err}"
            except (ValueError, KeyError, TypeError) as err:
                need_list = True  # a malformed answer: start over from a fresh list
                why = f"watch answer unusable: {err}"
            else:
                why = ""
            if loop.time() - began >= HEALTHY_WATCH_SECONDS:
                backoff.reset()
                if not why:
                    continue  # the server ended a healthy watch (its timeout): watch on at once
            why = why or "watch ended early"
            delay = backoff.next()
            log.info("%s, again in %.1fs kind=%s namespace=%s name=%s", why, delay, *watch.key)
            await asyncio.sleep(delay)


def _report_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("object watch died task=%s error=%r", task.get_name(), task.exception())
