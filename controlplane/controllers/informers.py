"""Shared informers: one list+watch per resource for all controllers, as client-go's informer factory.

Controllers ask for the informers they need while they are built (adding their handlers and indexes);
the manager then starts them all and waits until every one has listed before any worker runs, so no
controller decides from a cache that has not seen the cluster yet. Cached objects carry no
managedFields, as upstream's controller manager trims them from its informers: no controller reads
them, and they were a large share of every cached pod.
"""

from __future__ import annotations

import asyncio
import contextlib

from kubeclient.client import KubeClient
from kubeclient.informer import IndexFunc, Informer, drop_managed_fields


class SharedInformers:
    def __init__(self, client: KubeClient, resync_period: float = 0.0) -> None:
        self.client = client
        self.resync_period = resync_period
        self._informers: dict[tuple[str, str], Informer] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def get(
        self,
        path: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        indexers: dict[str, IndexFunc] | None = None,
        resync_period: float | None = None,
    ) -> Informer:
        """The informer of `path` (e.g. /api/v1/pods), created on first request; one per path and
        selectors."""
        key = (path, (field_selector or "") + "|" + (label_selector or ""))
        informer = self._informers.get(key)
        if informer is None:
            informer = Informer(
                self.client,
                path,
                field_selector=field_selector,
                label_selector=label_selector,
                resync_period=self.resync_period if resync_period is None else resync_period,
                transform=drop_managed_fields,
            )
            self._informers[key] = informer
        if indexers:
            informer.add_indexers(indexers)
        return informer

    def start(self) -> None:
        """Run every informer not yet running (those asked for since the last start too)."""
        for key, informer in self._informers.items():
            if key not in self._tasks:
                self._tasks[key] = asyncio.create_task(informer.run(), name=f"informer {key[0]}")

    async def wait_for_sync(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self._informers.values()))

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self._informers.values())

    async def stop(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = {}
