"""Finishes namespace deletion: removes everything a Terminating namespace holds, then the namespace.

Upstream's namespace controller runs in the controller manager and talks to the API; ours runs inside
the API server on the registry because it is the only controller the API itself needs to keep its
promise (deleting a namespace removes what it holds). The Namespace kind starts it. Pods bound to a node
are deleted gracefully, so the namespace waits for their kubelet, as upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from controlplane.apiserver import kinds
from controlplane.apiserver.errors import ApiError
from controlplane.apiserver.kinds.base import Kind
from controlplane.apiserver.options import DeleteOptions
from controlplane.apiserver.registry import Registry

log = logging.getLogger("controlplane.nsfinalizer")
FINALIZER = "kubernetes"


class NamespaceFinalizer:
    def __init__(self, registry: Registry, namespaces: Kind, interval: float = 1.0) -> None:
        self.registry = registry
        self.namespaces = namespaces
        self.interval = interval
        self._tasks: dict[str, asyncio.Task[None]] = {}
        registry.marked_listeners.append(self._marked)

    def _marked(self, kind: Kind, obj: dict[str, Any]) -> None:
        if kind is self.namespaces:
            self.enqueue(obj["metadata"]["name"])

    def enqueue(self, name: str) -> None:
        task = self._tasks.get(name)
        if task is None or task.done():
            self._tasks[name] = asyncio.create_task(self._finish(name), name=f"ns-finalize-{name}")

    def start(self) -> None:
        """Pick up namespaces that were Terminating when the server stopped."""
        ns = self.namespaces
        for cached in self.registry.cache.list(ns.bucket, ns.prefix("")):
            if cached.view["metadata"].get("deletionTimestamp"):
                self.enqueue(cached.view["metadata"]["name"])

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _finish(self, name: str) -> None:
        while True:
            try:
                if await self._sweep(name):
                    await self.registry.guaranteed_update(
                        self.namespaces, "", name, _drop_finalizer, "finalize"
                    )
                    return
            except ApiError as err:
                if err.code == 404:
                    return
                log.warning("namespace=%s step=finalize error=%s", name, err.message)
            except Exception:
                log.exception("namespace=%s step=finalize", name)
            await asyncio.sleep(self.interval)

    async def _sweep(self, name: str) -> bool:
        """Delete what the namespace holds; True once nothing is left."""
        await self.registry.cache.wait_fresh()
        empty = True
        for res in kinds.sweepable():
            items = self.registry.cache.list(res.bucket, res.prefix(name))
            if not items:
                continue
            empty = False
            pending = [c for c in items if not c.view["metadata"].get("deletionTimestamp")]
            await self.registry.delete_collection(res, name, pending, DeleteOptions(propagation="Background"))
        return empty


def _drop_finalizer(current: dict[str, Any]) -> dict[str, Any]:
    spec = current.setdefault("spec", {})
    spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
    return current
