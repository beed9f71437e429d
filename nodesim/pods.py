"""The pods bound to simulated nodes, driven through their lives (stages.py says what comes next).

One informer over every scheduled pod (`spec.nodeName!=`: a watch, never a poll per node) feeds a work
queue of pod keys; workers take a key, look at the pod and its record, make at most one write and, when
something is due later (the start delay, an exit, a back-off, a grace period), put the key back for then.
A write that fails puts the key back with the queue's per-key back-off, so a refusing server slows the
simulation down rather than being hammered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.informer import Informer, drop_managed_fields
from kubeclient.workqueue import WorkQueue
from nodesim import podstatus, stagefile, stages
from nodesim.addressing import Addresses
from nodesim.heartbeats import SimNode
from nodesim.nodeobjects import now
from nodesim.settings import SimSettings
from nodesim.stages import PodRecord

log = logging.getLogger("nodesim.pods")


def pod_key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_path(pod: dict[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


class PodDriver:
    def __init__(
        self,
        client: KubeClient,
        settings: SimSettings,
        nodes: dict[str, SimNode],
        addresses: Addresses,
        gate: asyncio.Semaphore,
    ) -> None:
        self.client = client
        self.settings = settings
        self.nodes = nodes
        self.addresses = addresses
        self.gate = gate
        self.records: dict[str, PodRecord] = {}
        self.deleting_since: dict[str, float] = {}
        self.queue: WorkQueue[str] = WorkQueue("nodesim_pods")
        self.informer = Informer(
            client, "/api/v1/pods", field_selector="spec.nodeName!=", transform=drop_managed_fields
        )
        self.informer.add_handler(
            on_add=self._changed, on_update=lambda _, p: self._changed(p), on_delete=self._gone
        )
        self.writes = 0
        self.errors = 0

    def _ours(self, pod: dict[str, Any]) -> bool:
        return (pod.get("spec") or {}).get("nodeName") in self.nodes

    def _changed(self, pod: dict[str, Any]) -> None:
        if self._ours(pod):
            self.queue.add(pod_key(pod))

    def _gone(self, pod: dict[str, Any]) -> None:
        if self._ours(pod):
            self.queue.add(pod_key(pod))

    async def run(self, workers: int) -> None:
        informer = asyncio.create_task(self.informer.run())
        tasks = [asyncio.create_task(self._work()) for _ in range(workers)]
        try:
            await asyncio.gather(informer, *tasks)
        finally:
            self.queue.shutdown()
            for task in (informer, *tasks):
                task.cancel()
            await asyncio.gather(informer, *tasks, return_exceptions=True)

    async def _work(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.sync(key)
                self.queue.forget(key)
            except ApiError as err:
                self.errors += 1
                if self.queue.num_requeues(key) == 0:
                    log.warning("pod %s: write failed, retrying with back-off: %s", key, err)
                self.queue.add_rate_limited(key)
            except Exception:
                self.errors += 1
                log.exception("pod %s: sync failed", key)
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def _forget(self, key: str) -> None:
        record = self.records.pop(key, None)
        self.deleting_since.pop(key, None)
        if record is not None and record.ip and record.node in self.nodes:
            self.addresses.release_pod_ip(self.nodes[record.node].index, record.ip)

    async def sync(self, key: str) -> None:
        pod = self.informer.get(key)
        if pod is None or not self._ours(pod):
            self._forget(key)
            return
        pod = stagefile.staged(pod, self.settings.stages)
        node = self.nodes[pod["spec"]["nodeName"]]
        clock = time.monotonic()
        record = self.records.get(key)
        if record is None or record.node != node.name:
            record = self.records[key] = self._adopt(pod, node, clock)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            await self._terminate(key, pod, clock)
            return
        if record.ended:
            return
        if record.started_at is None:
            due = record.seen_at + stages.start_delay(pod, self.settings)
            if clock < due:
                self.queue.add_after(key, due - clock)
                return
            await self._start(key, pod, node, record, clock)
            return
        if record.waiting_until is not None:
            if clock < record.waiting_until:
                self.queue.add_after(key, record.waiting_until - clock)
                return
            await self._start(key, pod, node, record, clock)
            return
        run_for = stages.run_for(pod, self.settings)
        if run_for is None:
            return
        exits_at = record.started_at + run_for
        if clock < exits_at:
            self.queue.add_after(key, exits_at - clock)
            return
        await self._exit(key, pod, node, record, clock)

    def _adopt(self, pod: dict[str, Any], node: SimNode, clock: float) -> PodRecord:
        """A record for a pod first seen: new, or already driven by an earlier run of the simulation (its
        phase and restart count taken from the API, so a restarted simulation carries on)."""
        record = PodRecord(node=node.name, seen_at=clock)
        status = pod.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            record.ended = True
        elif status.get("phase") == "Running" and status.get("podIP"):
            record.started_at = clock
            record.ip = status["podIP"] if status["podIP"] != node.ip else ""
            statuses = status.get("containerStatuses") or [{}]
            record.restarts = int(statuses[0].get("restartCount", 0))
            record.start_stamp = ((statuses[0].get("state") or {}).get("running") or {}).get(
                "startedAt", now()
            )
        return record

    async def _write(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        async with self.gate:
            try:
                await self.client.patch(pod_path(pod) + "/status", {"status": status})
                self.writes += 1
            except ApiError as err:
                if not err.not_found:
                    raise

    async def _start(
        self, key: str, pod: dict[str, Any], node: SimNode, record: PodRecord, clock: float
    ) -> None:
        if not record.ip and not (pod.get("spec") or {}).get("hostNetwork"):
            record.ip = self.addresses.take_pod_ip(node.index)
        stamp = now()
        before = (record.started_at, record.start_stamp, record.waiting_until)
        record.started_at, record.start_stamp, record.waiting_until = clock, stamp, None
        try:
            await self._write(pod, podstatus.running(pod, record, node.ip, stamp))
        except BaseException:
            # Not started as far as the API knows: the retry must start it again, not wait for its exit.
            record.started_at, record.start_stamp, record.waiting_until = before
            raise
        run_for = stages.run_for(pod, self.settings)
        if run_for is not None:
            self.queue.add_after(key, run_for)

    async def _exit(
        self, key: str, pod: dict[str, Any], node: SimNode, record: PodRecord, clock: float
    ) -> None:
        code = stages.exit_code(pod)
        stamp = now()
        if stages.restarts_after_exit(pod, code):
            backoff = stages.crash_backoff(record.restarts)
            before = (record.last_exit, record.restarts, record.waiting_until)
            record.last_exit = (code, record.start_stamp, stamp)
            record.restarts += 1
            record.waiting_until = clock + backoff
            try:
                await self._write(pod, podstatus.backing_off(pod, record, node.ip, stamp))
            except BaseException:
                record.last_exit, record.restarts, record.waiting_until = before  # the retry exits it again
                raise
            self.queue.add_after(key, backoff)
            return
        await self._write(pod, podstatus.ended(pod, record, node.ip, stamp, code))
        record.ended = True  # only once written: a failed write is retried

    async def _terminate(self, key: str, pod: dict[str, Any], clock: float) -> None:
        """A deleted pod: its containers stop (at once, or after the grace period when they ignore
        SIGTERM), then the pod goes, as the kubelet ends it: a DELETE with no grace, on this UID only."""
        since = self.deleting_since.setdefault(key, clock)
        remaining = since + stages.termination_wait(pod) - clock
        if remaining > 0:
            self.queue.add_after(key, remaining)
            return
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": pod["metadata"]["uid"]},
        }
        async with self.gate:
            try:
                await self.client.delete(pod_path(pod), body)
                self.writes += 1
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
