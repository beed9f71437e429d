"""One probe of one container: runs on its own timer, counts results against the thresholds, and keeps
the current verdict for the container it last saw (upstream pkg/kubelet/prober/worker.go).

The verdict is keyed by container ID: when the container is replaced the worker starts over from the
kind's initial value (readiness: not ready; liveness: alive; startup: unknown), so a verdict about a
dead container never touches its successor. A liveness or startup failure puts the worker on hold
until a new container appears, so the one failure leads to exactly one kill.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent.expansion import expand_static
from agent.probes.metrics import handler_name
from agent.probes.result import Outcome, Result, Target
from agent.probes.spec import Kind, ProbeSpec

if TYPE_CHECKING:
    from agent.probes.manager import ProberManager

log = logging.getLogger("agent.probes")

# Upstream retries a probe that could not run at all (not one that failed) this many times.
MAX_PROBE_RETRIES = 3
INITIAL: dict[Kind, Result | None] = {Kind.READINESS: Result.FAILURE, Kind.LIVENESS: Result.SUCCESS, Kind.STARTUP: None}


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(frozen=True)
class ContainerView:
    """What the pod worker last saw of a container in CRI: all a probe needs to decide whether to run."""

    id: str
    state: str  # created / running / exited / unknown
    started_at: float = 0.0  # epoch seconds


class ProbeWorker:
    def __init__(self, manager: ProberManager, uid: str, container: dict[str, Any], kind: Kind, spec: ProbeSpec) -> None:
        self.manager = manager
        self.uid = uid
        self.name: str = container["name"]
        self.ports = tuple(
            (p["name"], int(p["containerPort"])) for p in container.get("ports") or [] if p.get("name") and p.get("containerPort")
        )
        self.kind = kind
        if spec.action.get("exec") is not None:
            # As upstream: $(VAR) in an exec probe's command expands with the container's literal env.
            command = expand_static(list(spec.action["exec"].get("command") or []), container)
            spec = dataclasses.replace(spec, action={"exec": {"command": command}})
        self.spec = spec
        self.handler = handler_name(spec.action)
        self.sidecar = container.get("restartPolicy") == "Always"  # restarted whatever the pod's policy
        self.container_id = ""
        self.result: Result | None = None
        self.last_result: Result | None = None
        self.result_run = 0
        self.on_hold = False
        self._waiter: asyncio.Future[None] | None = None
        self._triggered = False
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"probe-{self.kind.name.lower()}-{self.uid}-{self.name}")

    def trigger(self) -> None:
        """Probe now rather than at the next tick (a container just started and has no verdict yet)."""
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        else:
            self._triggered = True

    def verdict(self, container_id: str) -> Result | None:
        return self.result if container_id and container_id == self.container_id else None

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
                log.exception("probe crashed pod=%s container=%s kind=%s", self.uid, self.name, self.kind.value)
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
        if result != self.result:
            self.result = result
            self.manager.changed(self)

    async def do_probe(self) -> bool:
        """One tick. False when the container is gone for good and the worker should end."""
        view = self.manager.view(self.uid, self.name)
        if view is None:
            return True  # not created yet
        if view.id != self.container_id:
            self.container_id = view.id
            self.on_hold = False
            self.last_result, self.result_run = None, 0
            self._set(INITIAL[self.kind])
        if self.on_hold:
            return True
        if view.state != "running":
            self._set(Result.FAILURE)
            return not (view.state == "exited" and not self.sidecar and self.manager.restart_never(self.uid))
        if self.kind is not Kind.STARTUP and not self.manager.started(self.uid, self.name, view.id, trigger=False):
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
        target = Target(self.manager.pod_ip(self.uid), view.id, self.ports)
        outcome = Outcome(Result.UNKNOWN, "")
        for _ in range(MAX_PROBE_RETRIES):
            started = time.perf_counter()
            outcome = await self.manager.run_handler(self.spec.action, target, float(self.spec.timeout))
            self.manager.metrics.observe(self.kind, self.handler, outcome.result, time.perf_counter() - started)
            if outcome.result is not Result.UNKNOWN:
                break
        kind = self.kind.value
        if outcome.result is Result.UNKNOWN:
            self.manager.event(self, "Warning", "Unhealthy", f"{kind} probe errored: {outcome.output}")
            log.info("probe errored pod=%s container=%s kind=%s output=%r", self.uid, self.name, kind, outcome.output)
            return None
        if outcome.result is Result.FAILURE:
            self.manager.event(self, "Warning", "Unhealthy", f"{kind} probe failed: {outcome.output}")
            log.info("probe failed pod=%s container=%s kind=%s output=%r", self.uid, self.name, kind, outcome.output)
        elif outcome.result is Result.WARNING:
            self.manager.event(self, "Warning", "ProbeWarning", f"{kind} probe warning: {outcome.output}")
        return outcome
