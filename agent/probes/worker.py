"""One probe of one container: runs on its own timer, counts results against the thresholds, and writes
its verdict about the container it last saw into the results store (upstream
pkg/kubelet/prober/worker.go).

The verdict is keyed by container ID: when the container is replaced the worker forgets the old
container's verdict and starts over from the kind's initial value (readiness: not ready; liveness:
alive; startup: unknown), so a verdict about a dead container never touches its successor. A liveness
or startup failure puts the worker on hold until a new container appears, so the one failure leads to
exactly one kill.

A worker knows its pod only through the PodView the manager keeps current, and tells the world only
through the results store and the event sink it was handed: it never calls its manager (which
import-linter holds to), so the manager and whoever reads verdicts can change without touching it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agent.expansion import expand_static
from agent.probes.metrics import ProbeMetrics, handler_name
from agent.probes.podview import ContainerView, PodView
from agent.probes.result import Outcome, Result, Target
from agent.probes.results import ResultsStore
from agent.probes.spec import Kind, ProbeSpec

log = logging.getLogger("agent.probes")

EventSink = Callable[[dict[str, Any], str, str, str, str], None]  # pod, container name, type, reason, message
HandlerRunner = Callable[[dict[str, Any], Target, float], Awaitable[Outcome]]  # action, target, timeout

# Upstream retries a probe that could not run at all (not one that failed) this many times.
MAX_PROBE_RETRIES = 3
INITIAL: dict[Kind, Result | None] = {
    Kind.READINESS: Result.FAILURE,
    Kind.LIVENESS: Result.SUCCESS,
    Kind.STARTUP: None,
}


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(frozen=True)
class ProbeDeps:
    """What every probe worker is handed: how to run a handler, where verdicts go, what to count, where
    events go."""

    run_handler: HandlerRunner
    results: ResultsStore
    metrics: ProbeMetrics
    on_event: EventSink


class ProbeWorker:
    def __init__(
        self, deps: ProbeDeps, pod: PodView, container: dict[str, Any], kind: Kind, spec: ProbeSpec
    ) -> None:
        self.deps = deps
        self.pod = pod
        self.uid = pod.uid
        self.name: str = container["name"]
        self.ports = tuple(
            (p["name"], int(p["containerPort"]))
            for p in container.get("ports") or []
            if p.get("name") and p.get("containerPort")
        )
        self.kind = kind
        if spec.action.get("exec") is not None:
            # As upstream: $(VAR) in an exec probe's command expands with the container's literal env.
            command = expand_static(list(spec.action["exec"].get("command") or []), container)
            spec = dataclasses.replace(spec, action={"exec": {"command": command}})
        self.spec = spec
        self.handler = handler_name(spec.action)
        self.sidecar = container.get("restartPolicy") == "Always"  # restarted whatever the pod's policy
        # Liveness and readiness wait for the startup probe's success, when the container has one.
        self.gated = kind is not Kind.STARTUP and bool(container.get(Kind.STARTUP.field))
        self.container_id = ""
        self.last_result: Result | None = None
        self.result_run = 0
        self.on_hold = False
        self._waiter: asyncio.Future[None] | None = None
        self._triggered = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(
            self.run(), name=f"probe-{self.kind.name.lower()}-{self.uid}-{self.name}"
        )

    def trigger(self) -> None:
        """Probe now rather than at the next tick (a container just started and has no verdict yet)."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        else:
            self._triggered = True

    @property
    def result(self) -> Result | None:
        """The verdict about the container this worker probes now."""
        return self.deps.results.get(self.kind, self.container_id)

    async def run(self) -> None:
        period = float(self.spec.period)
        # The first run waits a random part of the period, so pods started (or adopted by a restarted
        # agent) together do not probe in lockstep ever after. A new container's readiness and startup
        # probes are not held back by it: the pod worker triggers them as soon as it sees the container
        # running without a verdict, so only liveness (whose verdict starts as alive) waits it out.
        await self._wait(random.uniform(0, period))
        while True:
            try:
                keep_going = await self.do_probe()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "probe crashed pod=%s container=%s kind=%s", self.uid, self.name, self.kind.value
                )
                keep_going = True
            if not keep_going:
                return
            await self._wait(period)

    async def _wait(self, seconds: float) -> None:
        """Sleep until the next tick or a trigger. A bare future and timer rather than wait_for on an
        event: with 220 probe workers this runs twenty times a second, and wait_for makes a task each
        time (about a fifth of a millisecond of CPU)."""
        if self._triggered:
            self._triggered = False
            return
        loop = asyncio.get_running_loop()
        self._waiter = waiter = loop.create_future()
        timer = loop.call_later(seconds, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _set(self, result: Result | None) -> None:
        self.deps.results.set(self.kind, self.container_id, result, self.uid)

    async def do_probe(self) -> bool:
        """One tick. False when the container is gone for good and the worker should end."""
        view = self.pod.containers.get(self.name)
        if view is None:
            return True  # not created yet
        if view.id != self.container_id:
            self.deps.results.remove(self.kind, self.container_id)
            self.container_id = view.id
            self.on_hold = False
            self.last_result, self.result_run = None, 0
            self._set(INITIAL[self.kind])
        if self.on_hold:
            return True
        if view.state != "running":
            self._set(Result.FAILURE)
            return not (view.state == "exited" and not self.sidecar and self.pod.restart_never)
        if self.gated and self.deps.results.get(Kind.STARTUP, view.id) is not Result.SUCCESS:
            return True  # liveness and readiness wait for the startup probe
        if self.kind is Kind.STARTUP and self.result is Result.SUCCESS:
            return True  # started once: nothing more to find out about this container
        if view.started_at and time.time() - view.started_at < self.spec.initial_delay:
            return True
        outcome = await self._probe(view)
        if outcome is None:
            return True  # could not run at all: the result is thrown away, as upstream does
        result = Result.SUCCESS if outcome.ok else Result.FAILURE
        if result == self.last_result:
            self.result_run += 1
        else:
            self.last_result, self.result_run = result, 1
        if (result is Result.FAILURE and self.result_run < self.spec.failure_threshold) or (
            result is Result.SUCCESS and self.result_run < self.spec.success_threshold
        ):
            return True
        self._set(result)
        if result is Result.FAILURE and self.kind in (Kind.LIVENESS, Kind.STARTUP):
            # The container is about to be killed; stop counting until its successor runs.
            self.on_hold = True
            self.result_run = 0
        return True

    async def _probe(self, view: ContainerView) -> Outcome | None:
        target = Target(self.pod.pod_ip, view.id, self.ports)
        outcome = Outcome(Result.UNKNOWN, "")
        for _ in range(MAX_PROBE_RETRIES):
            started = time.perf_counter()
            outcome = await self.deps.run_handler(self.spec.action, target, float(self.spec.timeout))
            self.deps.metrics.observe(self.kind, self.handler, outcome.result, time.perf_counter() - started)
            if outcome.result is not Result.UNKNOWN:
                break
        kind = self.kind.value
        if outcome.result is Result.UNKNOWN:
            self._event("Unhealthy", f"{kind} probe errored and resulted in unknown state: {outcome.output}")
            log.info(
                "probe errored pod=%s container=%s kind=%s output=%r",
                self.uid,
                self.name,
                kind,
                outcome.output,
            )
            return None
        if outcome.result is Result.FAILURE:
            self._event("Unhealthy", f"{kind} probe failed: {outcome.output}")
            log.info(
                "probe failed pod=%s container=%s kind=%s output=%r",
                self.uid,
                self.name,
                kind,
                outcome.output,
            )
        elif outcome.result is Result.WARNING:
            self._event("ProbeWarning", f"{kind} probe warning: {outcome.output}")
        return outcome

    def _event(self, reason: str, message: str) -> None:
        self.deps.on_event(self.pod.pod, self.name, "Warning", reason, message)
