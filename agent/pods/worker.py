"""One worker per pod UID, walking the pod through upstream's phases (pkg/kubelet/pod_workers.go):

  syncing -> terminating -> terminated -> finished

- syncing (agent/pods/sync.py): converge toward the spec; a pod that reaches Succeeded/Failed, is
  deleted, or vanished from the API (force deletion) moves on.
- terminating (agent/pods/terminating.py): stop everything with the grace period in force. A shorter
  grace period arriving meanwhile (a second `kubectl delete --grace-period=1`) cancels the stop under
  way and starts it over with the shorter one, as upstream's cancelled sync context does.
- terminated (agent/pods/terminated.py): the final status (only now may a terminal phase reach the
  API), and the final DELETE of a deleted pod.
- finished: wait for the API object to go, then remove what is left in CRI and on disk, and exit.

Each phase's work runs as a task the worker watches: a deletion during a sync cancels the sync (a
postStart hook still running is abandoned with it) and terminating begins at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agent.cri import CRIError
from agent.pods.context import PodContext
from agent.pods.events import WARNING
from agent.pods.podstate import Phase, PodState, effective_grace
from agent.pods.spec import being_deleted
from agent.pods.sync import sync_pod
from agent.pods.terminated import remove_pod, sync_terminated_pod
from agent.pods.terminating import StillRunning, sync_terminating_pod, sync_terminating_runtime_pod
from kubeclient.errors import ApiError
from kubeclient.eventwait import wait_event

log = logging.getLogger("agent.pods.worker")

RETRY_AFTER_ERROR = 5.0
STATIC_START_RETRY = 0.5  # seconds between looks at whether an older static pod of the name has stopped
T = TypeVar("T")

Admission = Callable[[dict[str, Any]], Awaitable[tuple[bool, str, str]]]


async def admit_all(pod: dict[str, Any]) -> tuple[bool, str, str]:
    return True, "", ""


class PodWorker:
    def __init__(
        self,
        ctx: PodContext,
        uid: str,
        get_pod: Callable[[], dict[str, Any] | None],
        admit: Admission = admit_all,
        may_start: Callable[[dict[str, Any]], bool] = lambda pod: True,
    ) -> None:
        self.ctx = ctx
        self.uid = uid
        self.get_pod = get_pod
        self.admit = admit
        self.may_start = may_start
        self.state = PodState(uid, name=uid)
        self.last_pod: dict[str, Any] | None = None
        self.syncs = 0
        self._wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._first_seen = time.monotonic()  # for kubelet_pod_start_duration_seconds
        self._synced_once = False
        self._start_observed = False

    @property
    def phase(self) -> Phase:
        return self.state.phase

    def could_have_running(self) -> bool:
        """Whether something of the pod may still run (upstream's CouldHaveRunningContainers)."""
        return self.state.rejection is None and self.state.could_have_running()

    def active(self) -> bool:
        """Admitted and not yet terminated: counts against the node's resources (filterOutInactivePods)."""
        return self.state.admitted and self.state.rejection is None and self.state.could_have_running()

    def wake(self) -> None:
        self._wake.set()

    def start(self, on_exit: Callable[[PodWorker], None]) -> None:
        async def main() -> None:
            try:
                await self.run()
            finally:
                on_exit(self)

        self.task = asyncio.create_task(main(), name=f"pod-worker-{self.uid}")

    async def run(self) -> None:
        delay = 0.0
        errors = 0
        while True:
            if delay > 0:
                try:
                    await wait_event(self._wake, delay)
                except TimeoutError:
                    pass
            self._wake.clear()
            try:
                done, delay = await self.step()
                errors = 0
            except (CRIError, ApiError, OSError, StillRunning) as err:
                errors += 1
                delay = min(RETRY_AFTER_ERROR * errors, 30.0)
                log.warning(
                    "pod sync failed pod=%s phase=%s error=%r retry_in=%.0fs",
                    self.state.name,
                    self.state.phase.value,
                    str(err),
                    delay,
                )
                continue
            except Exception:
                # A bug or a spec we do not understand: keep the worker (a dead one would be restarted at
                # once by the manager, in a tight loop) and retry slowly.
                errors += 1
                delay = min(RETRY_AFTER_ERROR * errors, 60.0)
                log.exception("pod sync crashed pod=%s retry_in=%.0fs", self.state.name, delay)
                continue
            if done:
                return

    def _current(self) -> dict[str, Any] | None:
        pod = self.get_pod()
        if pod is not None:
            self.last_pod = pod
            self.state.name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        return pod

    async def step(self) -> tuple[bool, float]:
        """One pass of the phase the pod is in: (the worker is done, seconds until the next pass)."""
        self.syncs += 1
        pod = self._current()
        phase = self.state.phase
        if phase is Phase.SYNCING:
            return False, await self._sync(pod)
        if phase is Phase.TERMINATING:
            await self._terminate(pod)
            return False, 0.0
        if phase is Phase.TERMINATED:
            await sync_terminated_pod(self.ctx, self.state, pod)
            self.state.phase = Phase.FINISHED
            return False, 0.0
        if pod is None:
            await remove_pod(self.ctx, self.state, self.last_pod)
            return True, 0.0
        if being_deleted(pod):
            await sync_terminated_pod(self.ctx, self.state, pod)  # a finished pod deleted later: DELETE it
        return False, self.ctx.cfg.sync_frequency

    # -- syncing ---------------------------------------------------------------------------------

    def _stop_wanted(self, pod: dict[str, Any] | None) -> bool:
        return pod is None or being_deleted(pod)

    def _begin_terminating(self, pod: dict[str, Any] | None, grace: bool = True) -> None:
        """Into terminating: with the effective grace period for a deleted or vanished pod, none (each
        container's own) for a pod that finished on its own."""
        st = self.state
        st.phase = Phase.TERMINATING
        if self.last_pod is None:
            st.orphan = True
        elif grace:
            st.grace, _ = effective_grace(st.grace, pod or self.last_pod)
        log.info("pod terminating pod=%s grace=%s", st.name, st.grace)

    async def _sync(self, pod: dict[str, Any] | None) -> float:
        if self._stop_wanted(pod):
            self._begin_terminating(pod)
            return 0.0
        assert pod is not None
        st = self.state
        if not st.admitted and not self.may_start(pod):
            # upstream's allowStaticPodStart: an earlier static pod of this name (the manifest before an
            # edit) is still stopping; this one starts once it has (its ports, its files are free).
            return STATIC_START_RETRY
        if not st.admitted:
            await self._admit(pod)
        began = time.monotonic()
        completed, outcome = await self._watched(sync_pod(self.ctx, st, pod), self._stop_wanted)
        self._observe_sync(began)
        if not completed or outcome is None:  # deleted meanwhile: the sync was cancelled
            self._begin_terminating(self.get_pod())
            return 0.0
        if outcome.terminal and st.rejection is not None:
            # Nothing of a rejected pod ever ran: its rejection is its last status (upstream's rejectPod
            # never hands the pod to a worker), so there is nothing to stop or to add.
            st.phase = Phase.TERMINATED
            return 0.0
        if outcome.terminal:
            self._begin_terminating(pod, grace=False)
            return 0.0
        return outcome.next_in

    def _observe_sync(self, began: float) -> None:
        """kubelet_pod_worker_duration_seconds for this sync, and the pod's start duration the first time
        its status says Running (upstream's SyncPod)."""
        self.ctx.metrics.pod_synced("sync" if self._synced_once else "create", time.monotonic() - began)
        self._synced_once = True
        if not self._start_observed and (self.ctx.status.last(self.uid) or {}).get("phase") == "Running":
            self._start_observed = True
            self.ctx.metrics.pod_started(time.monotonic() - self._first_seen)

    async def _admit(self, pod: dict[str, Any]) -> None:
        st = self.state
        st.admitted = True
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        ok, reason, message = await self.admit(pod)
        if not ok:
            st.rejection = (reason, message)
            self.ctx.recorder.event(pod, WARNING, reason, message)
            log.info("pod rejected pod=%s reason=%s message=%r", st.name, reason, message)

    # -- terminating -----------------------------------------------------------------------------

    def _grace_shortened(self, pod: dict[str, Any] | None) -> bool:
        st = self.state
        if pod is None and self.last_pod is None:
            return False
        if st.grace is None:
            if pod is None or being_deleted(pod):
                st.grace, _ = effective_grace(None, pod or self.last_pod)  # applies from the next attempt
            return False
        grace, shortened = effective_grace(st.grace, pod or self.last_pod)
        if shortened:
            log.info("grace period shortened pod=%s from=%ds to=%ds", st.name, st.grace, grace)
            st.grace = grace
        return shortened

    async def _terminate(self, pod: dict[str, Any] | None) -> None:
        st = self.state
        if st.orphan:
            await sync_terminating_runtime_pod(self.ctx, st)
            st.phase = Phase.FINISHED
            return
        target = pod or self.last_pod
        assert target is not None
        completed, _ = await self._watched(
            sync_terminating_pod(self.ctx, st, target, st.grace), self._grace_shortened
        )
        if not completed:
            return  # started over with the shorter grace period at the next pass
        st.phase = Phase.TERMINATED

    # -- watching a phase's work -----------------------------------------------------------------

    async def _watched(
        self, work: Awaitable[T], interrupt: Callable[[dict[str, Any] | None], bool]
    ) -> tuple[bool, T | None]:
        """Run `work`, and on every wake-up meanwhile ask `interrupt` about the pod as it is now: when it
        says so, cancel the work and return (False, None); else (True, its result). Wake-ups that do not
        interrupt are kept for the next pass."""
        task: asyncio.Task[T] = asyncio.ensure_future(work)
        woken = False
        try:
            while not task.done():
                waiter = asyncio.ensure_future(self._wake.wait())
                done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if waiter not in done:
                    waiter.cancel()
                    await asyncio.gather(waiter, return_exceptions=True)
                    break
                self._wake.clear()
                woken = True
                if task in done:
                    break
                if interrupt(self._current()):
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    return False, None
            return True, task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if woken:
                self._wake.set()
