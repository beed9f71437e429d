"""The pod manager: turns informer events and runtime changes into wake-ups of per-pod workers.

Desired state arrives from the API through the informer; actual state from a PLEG-like relist of CRI
about once a second (containerd 1.6 has no container event stream over CRI). Either kind of change wakes
the worker of that pod UID, which does all the work. Sandboxes found in CRI for pods the API no longer
has (once the informer has synced, so a slow first list never kills healthy pods) get a worker too,
which stops and removes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from agent.cri import CRIError
from agent.kube.pods import pod_by_uid
from agent.pods import labels as L
from agent.pods.backoff import format_go_duration
from agent.pods.events import field_of
from agent.pods.worker import PodContext, PodWorker
from kubeclient.informer import Informer

log = logging.getLogger("agent.pods.manager")


def _desired(pod: dict[str, Any]) -> str:
    meta = {k: v for k, v in pod["metadata"].items() if k not in ("resourceVersion", "managedFields", "generation")}
    return json.dumps([meta, pod.get("spec")], sort_keys=True, separators=(",", ":"))


class PodManager:
    def __init__(self, ctx: PodContext) -> None:
        self.ctx = ctx
        self.informer: Informer | None = None
        self.workers: dict[str, PodWorker] = {}
        self._seen: dict[str, str] = {}  # uid -> what of the pod a worker acts on, serialized
        self._stopping = False
        self._fingerprints: dict[str, tuple[tuple[str, int], ...]] = {}
        self.relists = 0
        self.last_relist = time.monotonic()  # for the PLEG health check, as upstream's

    # -- desired state ---------------------------------------------------------------------------

    def attach(self, informer: Informer) -> None:
        self.informer = informer
        informer.add_handler(
            on_add=lambda pod: self.on_pod_event("ADDED", pod),
            on_update=lambda _old, pod: self.on_pod_event("MODIFIED", pod),
            on_delete=lambda pod: self.on_pod_event("DELETED", pod),
        )

    def pod(self, uid: str) -> dict[str, Any] | None:
        return pod_by_uid(self.informer, uid) if self.informer is not None else None

    def on_pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        """Informer handler: a new, deleted or re-specified pod is a reason to sync it. Changes to the
        status alone (mostly our own writes coming back) are not, as upstream's pod config ignores them."""
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            self._seen.pop(uid, None)
            if uid in self.workers:
                self.workers[uid].wake()
            return
        desired = _desired(pod)
        if kind == "MODIFIED" and self._seen.get(uid) == desired and uid in self.workers:
            return
        self._seen[uid] = desired
        self._ensure_worker(uid).wake()

    def wake(self, uid: str) -> None:
        """Something about the pod changed outside CRI and the API (a probe verdict): sync it."""
        worker = self.workers.get(uid)
        if worker is not None:
            worker.wake()

    def container_event(self, pod: dict[str, Any], name: str, type_: str, reason: str, message: str) -> None:
        """An event about one of the pod's containers, with its fieldPath (for the prober)."""
        self.ctx.recorder.event(pod, type_, reason, message, field_of(pod, name))

    def _ensure_worker(self, uid: str) -> PodWorker:
        worker = self.workers.get(uid)
        if worker is None:
            worker = PodWorker(self.ctx, uid, lambda: self.pod(uid))
            self.workers[uid] = worker
            worker.start(self._worker_exited)
        return worker

    def _worker_exited(self, worker: PodWorker) -> None:
        if self.workers.get(worker.uid) is worker:
            del self.workers[worker.uid]
        if self._stopping:
            return
        # The pod may have come back (or changed) while the worker was finishing.
        pod = self.pod(worker.uid)
        if pod is not None and not pod["metadata"].get("deletionTimestamp"):
            self._ensure_worker(worker.uid).wake()

    # -- actual state ----------------------------------------------------------------------------

    async def relist(self) -> set[str]:
        """One PLEG pass: wake the workers of pods whose sandboxes or containers changed."""
        sandboxes = await self.ctx.cri.list_pod_sandbox()
        containers = await self.ctx.cri.list_containers()
        prints: dict[str, list[tuple[str, int]]] = {}
        for sb in sandboxes:
            uid = sb.labels.get(L.POD_UID)
            if uid:
                prints.setdefault(uid, []).append((sb.id, sb.state))
        for c in containers:
            uid = c.labels.get(L.POD_UID)
            if uid:
                prints.setdefault(uid, []).append((c.id, c.state))
        current = {uid: tuple(sorted(v)) for uid, v in prints.items()}
        changed = {uid for uid in set(current) | set(self._fingerprints) if current.get(uid) != self._fingerprints.get(uid)}
        self._fingerprints = current
        self.relists += 1
        self.last_relist = time.monotonic()
        synced = self.informer is not None and self.informer.synced.is_set()
        for uid in changed:
            if uid in self.workers:
                self.workers[uid].wake()
            elif uid in current and synced:
                # In CRI but no worker: a pod the API has (worker retired) or an orphan to clean up.
                self._ensure_worker(uid).wake()
        if synced:
            for uid in current:
                if uid not in self.workers and self.pod(uid) is None:
                    self._ensure_worker(uid).wake()
        return changed

    def pleg_problem(self, threshold: float = 180.0) -> str | None:
        """Upstream's PLEG health message when relisting has not succeeded for `threshold` seconds."""
        since = time.monotonic() - self.last_relist
        if since < threshold:
            return None
        return (
            f"PLEG is not healthy: pleg was last seen active {format_go_duration(since)} ago; "
            f"threshold is {format_go_duration(threshold)}"
        )

    async def run_pleg(self) -> None:
        while True:
            try:
                await self.relist()
            except CRIError as err:
                log.debug("relist failed error=%r", str(err))
            except Exception:
                log.exception("relist crashed")
            await asyncio.sleep(self.ctx.cfg.relist_period)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
