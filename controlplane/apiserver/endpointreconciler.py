"""The lease endpoint reconciler: the `kubernetes` Service's Endpoints list every live API server.

Upstream's `--endpoint-reconciler-type=lease` (pkg/controlplane/reconcilers/lease.go), which this follows:
every API server writes a record of its own address under `/masterleases/<ip>` with a time to live (an
etcd lease of 15 s) and renews it every 10 s; then it lists the records and, when the `kubernetes`
Endpoints do not name exactly those addresses (sorted) on its port, rewrites them and the EndpointSlice.
A server that stops removes its record and reconciles once more, so the others see it gone at once; one
that dies stops renewing, etcd deletes its record when the lease runs out, and the next survivor's round
drops it. An empty listing never erases the Endpoints (upstream refuses that too).

Endpoints carry one port per subset, so all replicas must serve on the same port, each on its own address:
upstream has no answer for several servers on one address (the port is the whole Service's). On one
machine each replica binds its own loopback address (127.0.0.2, 127.0.0.3, ...: Linux routes all of
127.0.0.0/8 to `lo` with no configuration) on the shared port; that keeps upstream's model (address per
replica, one port) and needs neither root nor an interface change.

It needs a store with keys that expire (`put_with_ttl`, the etcd backend). A SQLite store has one server
by construction (its file belongs to one process), so that server keeps writing itself alone at start
(bootstrap.py), as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Protocol

from controlplane.apiserver.bootstrap import endpoint_addresses, write_endpoints
from controlplane.apiserver.registry import Registry
from controlplane.storage import NotFoundError

log = logging.getLogger("controlplane.apiserver.endpointreconciler")

LEASES_PREFIX = "/masterleases/"
# Upstream's DefaultEndpointReconcilerTTL and the controller's EndpointInterval.
DEFAULT_TTL = 15
DEFAULT_INTERVAL = 10.0


class LeaseStore(Protocol):
    async def put_with_ttl(self, key: str, value: bytes, ttl: int) -> int: ...


def lease_record(ip: str) -> bytes:
    """What upstream stores under a master lease key: an Endpoints object naming the address."""
    record = {
        "kind": "Endpoints",
        "apiVersion": "v1",
        "metadata": {"name": ip, "creationTimestamp": None},
        "subsets": [{"addresses": [{"ip": ip}]}],
    }
    return json.dumps(record, separators=(",", ":")).encode()


def desired(leases: list[str]) -> list[str]:
    """The addresses the Endpoints should list: every live record, sorted as upstream sorts them."""
    return sorted(set(leases))


@dataclass
class LeaseEndpointReconciler:
    registry: Registry
    ip: str
    port: int
    ttl: int = DEFAULT_TTL
    interval: float = DEFAULT_INTERVAL

    def __post_init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return LEASES_PREFIX + self.ip

    async def live(self) -> list[str]:
        """The addresses with a live record, read from the store (not the cache: a consistent read)."""
        items, _, _ = await self.registry.store.list(LEASES_PREFIX)
        return [kv.key[len(LEASES_PREFIX) :] for kv in items]

    async def reconcile(self) -> list[str]:
        """Renew our record, then make the Endpoints name every live server; returns those addresses."""
        store = self.registry.store
        await store.put_with_ttl(self.key, lease_record(self.ip), self.ttl)  # type: ignore[attr-defined]
        return await self._rewrite()

    async def _rewrite(self) -> list[str]:
        wanted = desired(await self.live())
        if not wanted:
            # Upstream: "no API server IP addresses were listed in storage, refusing to erase all
            # endpoints for the kubernetes Service".
            log.warning("event=no-master-leases refusing to erase the kubernetes endpoints")
            return wanted
        # Our own watch may be behind another server's rewrite: compare with what the store holds.
        await self.registry.cache.wait_fresh()
        if endpoint_addresses(self.registry) != (wanted, self.port):
            log.info("event=endpoints-reset service=default/kubernetes addresses=%s", ",".join(wanted))
            await write_endpoints(self.registry, wanted, self.port)
        return wanted

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="endpoint-reconciler")

    async def _loop(self) -> None:
        while True:
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # etcd away, a conflicting rewrite: the next round heals it
                log.warning("event=endpoint-reconcile-failed cause=%s", err)
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        """Stop renewing, remove our record and rewrite the Endpoints without us (upstream's
        RemoveEndpoints on shutdown), so clients stop being sent to a server that is going away."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            with contextlib.suppress(NotFoundError):
                await self.registry.store.delete(self.key, 0)
            await self._rewrite()
        except Exception as err:  # shutting down: the lease's TTL removes us anyway
            log.warning("event=endpoint-remove-failed cause=%s", err)
