"""The prober manager: one worker per container probe, and the verdicts the pod workers read.

The pod worker owns the pod: after each look at CRI it tells the manager what runs (`sync_pod`), reads
`started`/`ready` for the status it writes, and asks `failed` before deciding to kill a container. The
manager never acts on containers itself. Probe workers write their verdicts into a results store
(agent/probes/results.py) and know nothing of the manager; the manager reads verdicts from the store
and, in `run`, drains its updates queue and wakes the pod worker of each changed verdict through
`on_change`, so all decisions about a pod stay in one place (upstream: pkg/kubelet/prober/
prober_manager.go and results/results_manager.go; the kubelet's sync loop reads the updates channels).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent.cri import CRIClient
from agent.probes.metrics import ProbeMetrics
from agent.probes.podview import ContainerView, PodView
from agent.probes.result import Outcome, Result, Target
from agent.probes.results import ResultsStore
from agent.probes.spec import Kind, container_probes
from agent.probes.worker import EventSink, HandlerRunner, ProbeDeps, ProbeWorker


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
        self.on_change = on_change
        self.results = ResultsStore()
        self.metrics = ProbeMetrics()
        self.deps = ProbeDeps(run_handler, self.results, self.metrics, on_event)
        self.workers: dict[tuple[str, str, Kind], ProbeWorker] = {}
        self._pods: dict[str, PodView] = {}

    @classmethod
    def for_runtime(
        cls, cri: CRIClient, user_agent: str, on_change: Callable[[str], None], on_event: EventSink
    ) -> ProberManager:
        from agent.probes.handlers import run_handler

        async def run(action: dict[str, Any], target: Target, timeout: float) -> Outcome:
            return await run_handler(action, target, timeout, cri, user_agent)

        return cls(run, on_change, on_event)

    async def run(self) -> None:
        """Wake the pod worker of every changed verdict, for as long as the agent runs. Updates queued
        together wake each pod once."""
        updates = self.results.updates
        while True:
            pods = [(await updates.get()).pod_uid]
            while not updates.empty():
                pods.append(updates.get_nowait().pod_uid)
            for uid in dict.fromkeys(pods):
                if uid in self._pods:
                    self.on_change(uid)

    # -- what the pod workers tell the manager ----------------------------------------------------

    def sync_pod(self, pod: dict[str, Any], pod_ip: str, views: dict[str, ContainerView]) -> None:
        """The pod's current containers; starts the workers its probes need (once per pod)."""
        uid = pod["metadata"]["uid"]
        view = self._pods.get(uid)
        if view is None:
            view = self._pods[uid] = PodView(pod)
        view.pod, view.pod_ip, view.containers = pod, pod_ip, views
        for container in probed_containers(pod):
            for kind, spec in container_probes(container).items():
                key = (uid, container["name"], kind)
                if key not in self.workers:
                    worker = ProbeWorker(self.deps, view, container, kind, spec)
                    self.workers[key] = worker
                    worker.start()

    def stop_liveness_and_startup(self, uid: str) -> None:
        """A pod being terminated is not killed again for failing liveness, as upstream's. A container
        whose startup probe is stopped counts as started, as upstream's with no startup worker."""
        for kind in (Kind.LIVENESS, Kind.STARTUP):
            for key in [k for k in self.workers if k[0] == uid and k[2] is kind]:
                worker = self._stop(key)
                if kind is Kind.LIVENESS:
                    self.results.remove(kind, worker.container_id)
                elif worker.container_id:
                    self.results.set(kind, worker.container_id, Result.SUCCESS, uid)

    def remove_pod(self, uid: str) -> None:
        for key in [k for k in self.workers if k[0] == uid]:
            self.results.remove(key[2], self._stop(key).container_id)
        self._pods.pop(uid, None)

    def _stop(self, key: tuple[str, str, Kind]) -> ProbeWorker:
        worker = self.workers.pop(key)
        if worker.task is not None:
            worker.task.cancel()
        return worker

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
        verdict = self.results.get(Kind.STARTUP, container_id)
        if verdict is None and trigger:
            worker.trigger()
        return verdict is Result.SUCCESS

    def ready(self, uid: str, name: str, container_id: str) -> bool:
        """The container passed its readiness probe (or has none); call only for started containers."""
        worker = self.workers.get((uid, name, Kind.READINESS))
        if worker is None:
            return True
        verdict = self.results.get(Kind.READINESS, container_id)
        if verdict is not Result.SUCCESS and worker.container_id != container_id:
            worker.trigger()  # a new container: find out now rather than at the next tick
        return verdict is Result.SUCCESS

    def failed(self, uid: str, name: str, container_id: str) -> tuple[Kind, int | None] | None:
        """(kind, the probe's own grace period) when liveness or startup says to kill this container."""
        for kind in (Kind.STARTUP, Kind.LIVENESS):
            worker = self.workers.get((uid, name, kind))
            if worker is not None and self.results.get(kind, container_id) is Result.FAILURE:
                view = self.view(uid, name)
                if view is not None and view.id == container_id and view.state == "running":
                    return kind, worker.spec.termination_grace
        return None

    def view(self, uid: str, name: str) -> ContainerView | None:
        """What the pod worker last said about the container."""
        state = self._pods.get(uid)
        return state.containers.get(name) if state is not None else None
