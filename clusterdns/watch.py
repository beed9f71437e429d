"""The zone kept in step with the cluster: informers on Services and EndpointSlices mark it stale on
every change and the next question rebuilds it once (a burst of changes costs one rebuild)."""

from __future__ import annotations

import asyncio

from clusterdns.records import Zone, build
from kubeclient.client import KubeClient
from kubeclient.informer import Informer


class ClusterZone:
    def __init__(self, client: KubeClient, domain: str = "cluster.local") -> None:
        self.domain = domain
        self.services = Informer(client, "/api/v1/services")
        self.slices = Informer(client, "/apis/discovery.k8s.io/v1/endpointslices")
        for informer in (self.services, self.slices):
            informer.add_handler(
                on_add=self._changed, on_update=lambda _o, _n: self._changed(), on_delete=self._changed
            )
        self._zone = Zone(domain)
        self._stale = True
        self._tasks: list[asyncio.Task[None]] = []

    def _changed(self, *_: object) -> None:
        self._stale = True

    @property
    def synced(self) -> bool:
        """Both informers have listed once (CoreDNS's kubernetes plugin reports ready from then on)."""
        return self.services.synced.is_set() and self.slices.synced.is_set()

    def zone(self) -> Zone:
        if self._stale:
            self._stale = False
            self._zone = build(self.services.list(), self.slices.list(), self.domain)
        return self._zone

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(i.run(), name=f"informer {i.path}") for i in (self.services, self.slices)
        ]
        await asyncio.gather(self.services.synced.wait(), self.slices.synced.wait())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
