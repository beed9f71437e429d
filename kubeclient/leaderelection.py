"""Leader election on a Lease, so two replicas of a component never act at once.

Two schedulers with separate caches could each give "the last slot" of a node to a different pod; two
controller managers could each create the missing replica. As upstream, the one holding the component's
Lease (kube-system/kube-scheduler, kube-system/kube-controller-manager) acts; others wait. Same lease
names and rules as upstream's components, so against a cluster that runs them these stand by.

Rules (client-go's leaderelection): a lease held by someone else is free only after it has gone
unrenewed for leaseDurationSeconds *as observed locally* (clocks of different machines are never
compared); the holder renews every retry period and gives up if it cannot renew within the renew
deadline; writes carry the resourceVersion read, so two candidates cannot both win. On a clean stop the
holder releases the lease (holder cleared) so a successor does not wait out the duration.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError

log = logging.getLogger(__name__)


@dataclass
class LeaderElection:
    """Settings, with upstream's defaults (componentbaseconfig's LeaderElectionConfiguration)."""

    name: str
    enabled: bool = True
    namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, client: KubeClient, settings: LeaderElection, identity: str | None = None) -> None:
        self.client = client
        self.settings = settings
        self.identity = identity or f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.name}"
        self._observed: tuple[str, str, float] | None = None  # (holder, renewTime, when we saw it change)
        self.transitions = 0

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One attempt, bounded by the renew deadline: this loop does its own retrying, on its own clock."""
        return await self.client.request(
            method, path, body=body, retry=False, deadline=self.settings.renew_deadline
        )

    async def acquire(self) -> None:
        """Return once this process holds the lease (retrying every retry period)."""
        announced = False
        while True:
            try:
                if await self._try_acquire_or_renew():
                    log.info(
                        "leader election: acquired lease=%s/%s identity=%s",
                        self.settings.namespace,
                        self.settings.name,
                        self.identity,
                    )
                    return
                if not announced:
                    holder = self._observed[0] if self._observed else "?"
                    log.info("leader election: waiting, lease held by %s", holder)
                    announced = True
            except (ApiError, OSError, TimeoutError) as err:
                log.warning("leader election: %s", err)
            await asyncio.sleep(self.settings.retry_period)

    async def hold(self) -> None:
        """Renew until renewal fails for longer than the renew deadline; then return (leadership lost)."""
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.retry_period)
            try:
                if await self._try_acquire_or_renew():
                    last_renewed = time.monotonic()
                    continue
                log.error("leader election: lease taken by %s", self._observed[0] if self._observed else "?")
                return
            except (ApiError, OSError, TimeoutError) as err:
                log.warning("leader election: renew failed: %s", err)
            if time.monotonic() - last_renewed > self.settings.renew_deadline:
                log.error("leader election: could not renew within %.0fs", self.settings.renew_deadline)
                return

    async def release(self) -> None:
        """Give the lease up (only if still ours), so a successor need not wait it out."""
        try:
            lease = await self._call("GET", self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": _micro_time()})
            await self._call("PUT", self._path, lease)
            log.info("leader election: released lease")
        except Exception as err:
            log.warning("leader election: release failed: %s", err)

    async def _try_acquire_or_renew(self) -> bool:
        now = _micro_time()
        duration = int(self.settings.lease_duration)
        try:
            lease = await self._call("GET", self._path)
        except ApiError as err:
            if not err.not_found:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.settings.name, "namespace": self.settings.namespace},
                "spec": {
                    "holderIdentity": self.identity,
                    "leaseDurationSeconds": duration,
                    "acquireTime": now,
                    "renewTime": now,
                    "leaseTransitions": 0,
                },
            }
            try:
                await self._call("POST", self._path.rsplit("/", 1)[0], body)
            except ApiError as create_err:
                if create_err.conflict:  # someone else created it first
                    return False
                raise
            return True
        spec: dict[str, Any] = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity") or ""
        renew = str(spec.get("renewTime") or "")
        if self._observed is None or self._observed[:2] != (holder, renew):
            self._observed = (holder, renew, time.monotonic())
        held_by_other = holder and holder != self.identity
        if held_by_other:
            lease_for = float(spec.get("leaseDurationSeconds") or duration)
            if time.monotonic() - self._observed[2] < lease_for:
                return False
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            self.transitions += 1
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": duration, "renewTime": now})
        try:
            await self._call("PUT", self._path, lease)  # carries the resourceVersion we read
        except ApiError as err:
            if err.conflict:
                return False
            raise
        return True


class LeadershipLost(RuntimeError):
    """Another replica holds the lease now; this one stopped acting (upstream's components exit too)."""


async def run_as_leader(
    elector: LeaderElector | None, stop: asyncio.Event, work: Callable[[asyncio.Event], Awaitable[None]]
) -> None:
    """Run `work(halt)` while holding the lease, until `stop` is set or leadership is lost.

    Waits for the lease first (returns at once if `stop` comes first); `halt` is set on either ending,
    and `work` is expected to return soon after. A clean stop releases the lease so a successor need not
    wait it out; lost leadership raises LeadershipLost. Without an elector, `work` just runs until stop."""
    if elector is not None and not await _until_stopped(elector.acquire(), stop):
        return
    halt = asyncio.Event()
    watchers = [asyncio.create_task(_relay(stop, halt))]
    if elector is not None:
        watchers.append(asyncio.create_task(elector.hold()))
    watchers[-1].add_done_callback(lambda _: halt.set())
    lost = False
    try:
        await work(halt)
    finally:
        lost = elector is not None and watchers[-1].done() and not stop.is_set()
        for w in watchers:
            w.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        if elector is not None and not lost:
            await elector.release()
    if lost:
        raise LeadershipLost(
            f"lost the lease {elector.settings.namespace}/{elector.settings.name}" if elector else ""
        )


async def _relay(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _until_stopped(work: Awaitable[None], stop: asyncio.Event) -> bool:
    """Run `work` unless `stop` comes first; True if the work finished."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False
