"""One simulation: register the nodes (or adopt this simulation's own from an earlier run), keep their
heartbeats and drive their pods until told to stop, then take everything it made away again (unless
asked to keep the nodes).

Registration refuses a Node of the same name that is not this simulation's (a real node, another
simulation's): nothing of it is touched.

Given several clients (one per API server of an HA control plane), the nodes are dealt out over them as a
load balancer in front of the servers would spread N kubelets' connections: node i registers, renews its
Lease, reports its status, and watches and writes its pods through client i mod K (a `Lane` each: its own
heartbeat timetable and its own watch of the scheduled pods, acting on its nodes' pods only).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubeclient.backoff import Backoff
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from nodesim.addressing import Addresses
from nodesim.heartbeats import Heartbeats, SimNode
from nodesim.nodeobjects import OWNER_ANNOTATION, lease_path, node_object, node_status, now
from nodesim.pods import PodDriver, pod_path
from nodesim.settings import SimSettings

log = logging.getLogger("nodesim")


# How long the clean-up on stop may take against a slow or refusing server before the process leaves.
CLEANUP_SECONDS = 30


class NotOurs(Exception):
    """A node of the simulation's name exists and belongs to someone else."""


@dataclass
class Lane:
    """One API server's share of the nodes: their heartbeats, and their pods' watch and writes."""

    client: KubeClient
    heartbeats: Heartbeats
    pods: PodDriver


class Simulation:
    def __init__(self, clients: KubeClient | Sequence[KubeClient], settings: SimSettings) -> None:
        """`clients`: one, or one per API server (node i goes through clients[i mod K]). They share the
        request gate (`settings.concurrency` in flight for the whole simulation)."""
        clients = [clients] if isinstance(clients, KubeClient) else list(clients)
        if not clients:
            raise ValueError("a simulation needs at least one client")
        self.settings = settings
        self.gate = asyncio.Semaphore(settings.concurrency)
        self.addresses = Addresses(settings.node_ip_base, settings.pod_ip_base)
        self.lanes: list[Lane] = []
        for client in clients:
            heartbeats = Heartbeats(client, settings, self.gate)
            pods = PodDriver(client, settings, heartbeats.nodes, self.addresses, self.gate)
            self.lanes.append(Lane(client, heartbeats, pods))
        self.registered = asyncio.Event()

    def lane(self, index: int) -> Lane:
        """The lane (API server) node `index` talks to."""
        return self.lanes[index % len(self.lanes)]

    @property
    def identity(self) -> str:
        return self.settings.prefix

    async def _register(self, index: int, name: str) -> SimNode:
        """Register one node, retrying with back-off (200 ms doubling to 7 s) while the server refuses."""
        backoff = Backoff(initial=0.2, maximum=7.0)
        while True:
            try:
                return await self._register_once(index, name)
            except ApiError as err:
                delay = backoff.next()
                log.warning("node %s: registration failed, retrying in %.1f s: %s", name, delay, err)
                await asyncio.sleep(delay)

    async def _register_once(self, index: int, name: str) -> SimNode:
        client = self.lane(index).client
        ip = self.addresses.node_ip(index)
        body = node_object(self.settings, name, ip, self.addresses.pod_cidr(index), self.identity)
        async with self.gate:
            try:
                node = await client.create("/api/v1/nodes", body)
            except ApiError as err:
                if not err.already_exists:
                    raise
                node = await client.get(f"/api/v1/nodes/{name}")
                owner = ((node.get("metadata") or {}).get("annotations") or {}).get(OWNER_ANNOTATION)
                if owner != self.identity:
                    raise NotOurs(
                        f"node {name} exists and is not this simulation's (prefix {self.identity!r})"
                    ) from None
            if not (node.get("status") or {}).get("conditions"):
                # A server that drops a created Node's status (or a node adopted from an earlier run).
                status = node_status(self.settings, name, ip, now())
                node = await client.patch(f"/api/v1/nodes/{name}/status", {"status": status})
        return SimNode(name=name, index=index, uid=node["metadata"]["uid"], ip=ip)

    async def register(self) -> None:
        started = time.monotonic()
        names = self.settings.node_names()
        nodes = await asyncio.gather(*(self._register(i, n) for i, n in enumerate(names)))
        for node in nodes:
            self.lane(node.index).heartbeats.add(node)
        log.info("registered %d simulated nodes in %.1f s", len(nodes), time.monotonic() - started)
        self.registered.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Register, then run the heartbeats and the pod driver until `stop` (which also ends a
        registration still retrying against a refusing server); then clean up."""
        waiter = asyncio.create_task(stop.wait())
        tasks: list[asyncio.Task[None]] = [asyncio.create_task(self.register())]
        try:
            done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            if waiter in done:
                return
            tasks[0].result()
            tasks = [
                task
                for lane in self.lanes
                for task in (
                    asyncio.create_task(lane.heartbeats.run()),
                    asyncio.create_task(lane.pods.run(self.settings.workers)),
                )
            ]
            done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not waiter:
                    task.result()  # a loop that ended on its own ended on an error: raise it
        finally:
            for task in (waiter, *tasks):
                task.cancel()
            await asyncio.gather(waiter, *tasks, return_exceptions=True)
            if not self.settings.keep_nodes:
                try:
                    async with asyncio.timeout(CLEANUP_SECONDS):
                        await self.cleanup()
                except TimeoutError:
                    log.error("clean-up not finished in %d s: simulated objects may be left", CLEANUP_SECONDS)

    async def cleanup(self) -> None:
        """Take away what the simulation made: its pods (at once: no kubelet is left to end them), the
        Leases and the Nodes, each lane through its own server."""
        counts = await asyncio.gather(*(self._cleanup(lane) for lane in self.lanes))
        log.info(
            "removed %d simulated nodes and %d pods", sum(n for n, _ in counts), sum(p for _, p in counts)
        )

    async def _cleanup(self, lane: Lane) -> tuple[int, int]:
        names = list(lane.heartbeats.nodes)
        pods = [p for p in lane.pods.informer.list() if (p.get("spec") or {}).get("nodeName") in names]
        remove = self._remove
        await asyncio.gather(*(remove(lane.client, pod_path(p), {"gracePeriodSeconds": 0}) for p in pods))
        await asyncio.gather(*(remove(lane.client, lease_path(n)) for n in names))
        await asyncio.gather(*(remove(lane.client, f"/api/v1/nodes/{n}") for n in names))
        return len(names), len(pods)

    async def _remove(self, client: KubeClient, path: str, options: dict[str, Any] | None = None) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **(options or {})}
        async with self.gate:
            try:
                await client.delete(path, body)
            except ApiError as err:
                if not err.not_found:
                    log.warning("could not remove %s: %s", path, err)
