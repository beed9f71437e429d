"""The pod manager: turns informer events and runtime changes into wake-ups of per-pod workers.

Desired state arrives from the API through the informer; actual state from a PLEG-like relist of CRI
about once a second (containerd 1.6 has no container event stream over CRI). Either kind of change wakes
the worker of that pod UID, which does all the work. Sandboxes found in CRI for pods the API no longer
has (once the informer has synced, so a slow first list never kills healthy pods) get a worker too,
which stops and removes them.

The manager also answers what concerns all pods: admission (one pod at a time, against the pods already
admitted, as upstream's HandlePodAdditions), whether a pod could still have running containers (for the
status manager's hold on terminal phases), and the log folders of pods that are gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any

from agent.cri import CRIError, pb
from agent.kube.pods import pod_by_name, pod_by_uid
from agent.pods import labels as L
from agent.pods.admission import admit
from agent.pods.backoff import format_go_duration
from agent.pods.context import PodContext
from agent.pods.cri_runtime import log_dir_uid, remove_pod_log_dirs
from agent.pods.events import field_of
from agent.pods.runtime import Fingerprint, fingerprint
from agent.pods.sysctls import Allowlist
from agent.pods.worker import PodWorker
from agent.staticpods.keys import full_name, is_mirror, is_static
from agent.staticpods.mirror import MirrorPods, current
from agent.staticpods.source import StaticPodSource
from kubeclient.errors import ApiError
from kubeclient.informer import Informer

log = logging.getLogger("agent.pods.manager")

LOG_GC_PERIOD = 60.0  # upstream's garbage collection period
# Admission refusals a Node newer than the one cached may turn around.
NODE_STALE_REASONS = ("NodeAffinity", "TaintToleration", "InvalidNodeInfo")
CONTAINER_STATE_NAMES = {
    pb.CONTAINER_CREATED: "created",
    pb.CONTAINER_RUNNING: "running",
    pb.CONTAINER_EXITED: "exited",
    pb.CONTAINER_UNKNOWN: "unknown",
}


def _desired(pod: dict[str, Any]) -> str:
    meta = {
        k: v
        for k, v in pod["metadata"].items()
        if k not in ("resourceVersion", "managedFields", "generation")
    }
    return json.dumps([meta, pod.get("spec")], sort_keys=True, separators=(",", ":"))


class PodManager:
    def __init__(self, ctx: PodContext) -> None:
        self.ctx = ctx
        self.informer: Informer | None = None
        self.workers: dict[str, PodWorker] = {}
        self._seen: dict[str, str] = {}  # uid -> what of the pod a worker acts on, serialized
        self._stopping = False
        self._fingerprints: dict[str, Fingerprint] = {}
        self.relists = 0
        self.last_relist = time.monotonic()  # for the PLEG health check, as upstream's
        self._admission = asyncio.Lock()
        self._last_log_gc = 0.0
        self._sysctls = Allowlist.build(ctx.cfg.allowed_unsafe_sysctls)
        ctx.status.could_have_running = self.could_have_running
        ctx.status.mirror_of = self.mirror_of
        self.static: StaticPodSource | None = None  # the pods of staticPodPath
        self.mirrors: MirrorPods | None = None  # woken when a static or a mirror pod changes

    # -- desired state ---------------------------------------------------------------------------

    def attach(self, informer: Informer) -> None:
        self.informer = informer
        informer.add_handler(
            on_add=lambda pod: self.on_pod_event("ADDED", pod),
            on_update=lambda _old, pod: self.on_pod_event("MODIFIED", pod),
            on_delete=lambda pod: self.on_pod_event("DELETED", pod),
        )

    def attach_static(self, source: StaticPodSource) -> None:
        """Static pods as a second source of desired state (upstream's file source beside the API's)."""
        self.static = source

    def pod(self, uid: str) -> dict[str, Any] | None:
        if self.static is not None and (static := self.static.get(uid)) is not None:
            return static
        return pod_by_uid(self.informer, uid) if self.informer is not None else None

    def mirror_of(self, static: dict[str, Any]) -> dict[str, Any] | None:
        """The current mirror pod of a static pod, where its status is written (None: none yet)."""
        if self.informer is None:
            return None
        meta = static["metadata"]
        api = pod_by_name(self.informer, meta["namespace"], meta["name"])
        return api if api is not None and is_mirror(api) and current(api, static) else None

    def on_static_change(self, uids: set[str]) -> None:
        """Static pods came (a worker runs them) or went (their worker stops them)."""
        for uid in uids:
            pod = self.static.get(uid) if self.static is not None else None
            if pod is None:
                self._seen.pop(uid, None)
                if uid in self.workers:
                    self.workers[uid].wake()
            else:
                self._seen[uid] = _desired(pod)
                self._ensure_worker(uid).wake()
        if self.mirrors is not None:
            self.mirrors.wake()

    def static_may_start(self, pod: dict[str, Any]) -> bool:
        """A static pod starts only when no other pod of its full name may still run (upstream's
        allowStaticPodStart): an edited manifest's new pod waits for the old one to stop."""
        if not is_static(pod):
            return True
        uid, name = pod["metadata"]["uid"], full_name(pod)
        return not any(
            w.uid != uid
            and w.last_pod is not None
            and full_name(w.last_pod) == name
            and w.could_have_running()
            for w in self.workers.values()
        )

    def _on_mirror_event(self, mirror: dict[str, Any]) -> None:
        """A mirror pod is shown, never run: its changes are the mirror reconciler's, and the static
        pod's worker writes its status once a current mirror pod is there."""
        if self.mirrors is not None:
            self.mirrors.wake()
        static = self.static.by_full_name(full_name(mirror)) if self.static is not None else None
        if static is not None:
            self.wake(static["metadata"]["uid"])

    def on_pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        """Informer handler: a new, deleted or re-specified pod is a reason to sync it. Changes to the
        status alone (mostly our own writes coming back) are not, as upstream's pod config ignores them."""
        if is_mirror(pod):
            self._on_mirror_event(pod)
            return
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

    def could_have_running(self, uid: str) -> bool:
        """Whether something of the pod may still run: its worker has not finished terminating it
        (upstream's CouldHaveRunningContainers)."""
        worker = self.workers.get(uid)
        return worker is not None and worker.could_have_running()

    async def admit(self, pod: dict[str, Any]) -> tuple[bool, str, str]:
        """Admission for a pod about to start, one at a time, against the pods admitted and not yet
        terminated (upstream's canAdmitPod over the active pods).

        The scheduler placed the pod against a Node at least as new as the binding; the Node this agent
        last read may be older (a pod bound right after `kubectl label node`). A refusal on what such a
        change moves (labels, taints, no Node yet) is therefore checked again against the Node read
        from the API now, as upstream's node lister has caught up by the time its admission runs."""
        async with self._admission:
            uid = pod["metadata"]["uid"]
            others = [w.last_pod for w in self.workers.values() if w.uid != uid and w.active() and w.last_pod]
            verdict = admit(pod, self.ctx.node(), others, self._sysctls)
            if not verdict.admit and verdict.reason in NODE_STALE_REASONS and self.ctx.fresh_node is not None:
                try:
                    fresh = await self.ctx.fresh_node()
                except (ApiError, OSError, TimeoutError) as err:
                    log.warning("node read for admission failed error=%r", str(err))
                    fresh = None
                if fresh is not None:
                    verdict = admit(pod, fresh, others, self._sysctls)
            return verdict.admit, verdict.reason, verdict.message

    def _ensure_worker(self, uid: str) -> PodWorker:
        worker = self.workers.get(uid)
        if worker is None:
            worker = PodWorker(self.ctx, uid, lambda: self.pod(uid), self.admit, self.static_may_start)
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
        started, wall = time.monotonic(), time.time()
        sandboxes = await self.ctx.cri.list_pod_sandbox()
        containers = await self.ctx.cri.list_containers()
        self._report(sandboxes, containers, wall, time.monotonic() - started)
        prints: dict[str, list[tuple[str, int]]] = {}
        for sb in sandboxes:
            uid = sb.labels.get(L.POD_UID)
            if uid:
                prints.setdefault(uid, []).append((sb.id, sb.state))
        for c in containers:
            uid = c.labels.get(L.POD_UID)
            if uid:
                prints.setdefault(uid, []).append((c.id, c.state))
        current = {uid: fingerprint(v) for uid, v in prints.items()}
        changed = {
            uid
            for uid in set(current) | set(self._fingerprints)
            if current.get(uid) != self._fingerprints.get(uid)
        }
        self._fingerprints = current
        self.relists += 1
        self.last_relist = time.monotonic()
        synced = self.informer is not None and self.informer.synced.is_set()
        for uid in changed:
            if uid in self.workers:
                # Each pass reads CRI itself (upstream's reads the PLEG's cache): a worker whose last
                # look already found this state (its own sandbox and container starts, mostly) has
                # nothing new to see, and a pass more would only repeat the same reads and writes.
                if self.ctx.service.observed(uid) != current.get(uid):
                    self.workers[uid].wake()
            elif uid in current and synced:
                # In CRI but no worker: a pod the API has (worker retired) or an orphan to clean up.
                self._ensure_worker(uid).wake()
        if synced:
            for uid in current:
                if uid not in self.workers and self.pod(uid) is None:
                    self._ensure_worker(uid).wake()
        return changed

    def _report(self, sandboxes: list[Any], containers: list[Any], wall: float, seconds: float) -> None:
        """The relist's kubelet_* metrics (upstream's updateRunningPodAndContainerMetrics)."""
        running = {sb.labels.get(L.POD_UID) or sb.id for sb in sandboxes if sb.state == pb.SANDBOX_READY}
        states: dict[str, int] = {}
        for c in containers:
            name = CONTAINER_STATE_NAMES.get(c.state, "unknown")
            states[name] = states.get(name, 0) + 1
        self.ctx.metrics.relisted(wall, seconds, len(running), states)

    def pleg_problem(self, threshold: float = 180.0) -> str | None:
        """Upstream's PLEG health message when relisting has not succeeded for `threshold` seconds."""
        since = time.monotonic() - self.last_relist
        if since < threshold:
            return None
        return (
            f"PLEG is not healthy: pleg was last seen active {format_go_duration(since)} ago; "
            f"threshold is {format_go_duration(threshold)}"
        )

    async def gc_pod_logs(self) -> list[str]:
        """Remove the log folders (/var/log/pods/<ns>_<name>_<uid>) of pods that are gone: no worker, not
        in the API, nothing in CRI (upstream's evictPodLogsDirectories, once all sources are ready)."""
        if self.informer is None or not self.informer.synced.is_set():
            return []
        try:
            entries = await asyncio.to_thread(os.listdir, self.ctx.cfg.pod_logs_dir)
        except OSError:
            return []
        known = set(self.workers) | set(self._fingerprints)
        gone = {
            uid
            for name in entries
            if (uid := log_dir_uid(name)) and uid not in known and self.pod(uid) is None
        }
        if not gone:
            return []
        removed = await asyncio.to_thread(remove_pod_log_dirs, self.ctx.cfg.pod_logs_dir, gone)
        if removed:
            log.info("pod log folders removed count=%d", len(removed))
        return removed

    async def run_pleg(self) -> None:
        while True:
            try:
                await self.relist()
                if time.monotonic() - self._last_log_gc >= LOG_GC_PERIOD:
                    self._last_log_gc = time.monotonic()
                    await self.gc_pod_logs()
                    self.ctx.crash_backoff.gc()
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
