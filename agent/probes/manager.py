"""The prober manager: one worker per container probe, and the verdicts the pod workers read.

The pod worker owns the pod: after each look at CRI it tells the manager what runs (`sync_pod`), reads
`started`/`ready` for the status it writes, and asks `failed` before deciding to kill a container. The
manager never acts on containers itself; when a verdict changes it only wakes that pod's worker through
`on_change`, so all decisions about a pod stay in one place (upstream: prober results feed the pod
worker and the status manager, pkg/kubelet/prober/prober_manager.go).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.cri import CRIClient
from agent.probes.metrics import ProbeMetrics
from agent.probes.result import Outcome, Result, Target
from agent.probes.spec import Kind, container_probes
from agent.probes.worker import ContainerView, ProbeWorker

EventSink = Callable[[dict[str, Any], str, str, str, str], None]  # pod, container name, type, reason, message
HandlerRunner = Callable[[dict[str, Any], Target, float], Awaitable[Outcome]]


@dataclass
class _PodState:
    pod: dict[str, Any]
    pod_ip: str = ""
    views: dict[str, ContainerView] = field(default_factory=dict)


def probed_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """App containers and sidecars (restartable init containers): the ones probes apply to."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [*sidecars, *(spec.get("containers") or [])]


class ProberManager:
    def __init__(
        self,
        run_handler: HandlerRunner,
        on_change: Callable[[str], None],
        on_event: EventSink,
    ) -> None:
        self.run_handler = run_handler
        self.on_change = on_change
        self.on_event = on_event
        self.workers: dict[tuple[str, str, Kind], ProbeWorker] = {}
        self._pods: dict[str, _PodState] = {}
        self.metrics = ProbeMetrics()

    @classmethod
    def for_runtime(
        cls, cri: CRIClient, user_agent: str, on_change: Callable[[str], None], on_event: EventSink
    ) -> ProberManager:
        from agent.probes.handlers import run_handler

        async def run(action: dict[str, Any], target: Target, timeout: float) -> Outcome:
            return await run_handler(action, target, timeout, cri, user_agent)

        return cls(run, on_change, on_event)

    # -- what the pod workers tell the manager ----------------------------------------------------

    def sync_pod(self, pod: dict[str, Any], pod_ip: str, views: dict[str, ContainerView]) -> None:
        """The pod's current containers; starts the workers its probes need (once per pod)."""
        uid = pod["metadata"]["uid"]
        state = self._pods.get(uid)
        if state is None:
            state = self._pods[uid] = _PodState(pod)
        state.pod, state.pod_ip, state.views = pod, pod_ip, views
        for container in probed_containers(pod):
            for kind, spec in container_probes(container).items():
                key = (uid, container["name"], kind)
                if key not in self.workers:
                    worker = ProbeWorker(self, uid, container, kind, spec)
                    self.workers[key] = worker
                    worker.start()

    def stop_liveness_and_startup(self, uid: str) -> None:
        """A pod being terminated is not killed again for failing liveness, as upstream's."""
        for kind in (Kind.LIVENESS, Kind.STARTUP):
            for key in [k for k in self.workers if k[0] == uid and k[2] is kind]:
                self._stop(key)

    def remove_pod(self, uid: str) -> None:
        for key in [k for k in self.workers if k[0] == uid]:
            self._stop(key)
        self._pods.pop(uid, None)

    def _stop(self, key: tuple[str, str, Kind]) -> None:
        worker = self.workers.pop(key)
        if worker.task is not None:
            worker.task.cancel()

    async def stop(self) -> None:
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.workers.clear()

    # -- what the pod workers read ----------------------------------------------------------------

    def started(self, uid: str, name: str, container_id: str, trigger: bool = True) -> bool:
        """The container passed its startup probe (or has none)."""
        worker = self.workers.get((uid, name, Kind.STARTUP))
        if worker is None:
            return True
        verdict = worker.verdict(container_id)
        if verdict is None and trigger:
            worker.trigger()
        return verdict is Result.SUCCESS

    def ready(self, uid: str, name: str, container_id: str) -> bool:
        """The container passed its readiness probe (or has none); call only for started containers."""
        worker = self.workers.get((uid, name, Kind.READINESS))
        if worker is None:
            return True
        verdict = worker.verdict(container_id)
        if verdict is not Result.SUCCESS and worker.container_id != container_id:
            worker.trigger()  # a new container: find out now rather than at the next tick
        return verdict is Result.SUCCESS

    def failed(self, uid: str, name: str, container_id: str) -> tuple[Kind, int | None] | None:
        """(kind, the probe's own grace period) when liveness or startup says to kill this container."""
        for kind in (Kind.STARTUP, Kind.LIVENESS):
            worker = self.workers.get((uid, name, kind))
            if worker is not None and worker.verdict(container_id) is Result.FAILURE:
                view = self.view(uid, name)
                if view is not None and view.id == container_id and view.state == "running":
                    return kind, worker.spec.termination_grace
        return None

    # -- what the workers ask ---------------------------------------------------------------------

    def view(self, uid: str, name: str) -> ContainerView | None:
        state = self._pods.get(uid)
        return state.views.get(name) if state is not None else None

    def pod_ip(self, uid: str) -> str:
        state = self._pods.get(uid)
        return state.pod_ip if state is not None else ""

    def restart_never(self, uid: str) -> bool:
        state = self._pods.get(uid)
        return state is not None and (state.pod.get("spec") or {}).get("restartPolicy") == "Never"

    def changed(self, worker: ProbeWorker) -> None:
        if self.workers.get((worker.uid, worker.name, worker.kind)) is worker:
            self.on_change(worker.uid)

    def event(self, worker: ProbeWorker, type_: str, reason: str, message: str) -> None:
        state = self._pods.get(worker.uid)
        if state is not None:
            self.on_event(state.pod, worker.name, type_, reason, message)
