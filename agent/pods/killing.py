"""Stopping containers as upstream's killContainer and killPod do (kuberuntime_container.go,
kuberuntime_termination_order.go): the Killing event, the grace period by upstream's rules, the preStop
hook within it, and, for a pod with sidecars, the order: app containers first, then sidecars in reverse
order, all out of one grace period (a sidecar waits for its turn with what is left, it does not get a
second full period).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from agent.pods.actions import REASON_LIVENESS, REASON_STARTUP
from agent.pods.events import NORMAL, WARNING, EventRecorder, field_of
from agent.pods.runtime import ContainerRecord, PodRuntime
from agent.pods.runtime_service import RuntimeService
from agent.pods.spec import app_containers, container_spec, has_sidecars, init_containers, is_sidecar

log = logging.getLogger("agent.pods.killing")

MIN_GRACE = 2  # upstream's minimumGracePeriodInSeconds: never less than this between SIGTERM and SIGKILL


def termination_grace(pod: dict[str, Any], container: dict[str, Any] | None, reason: str = "") -> int:
    """upstream's setTerminationGracePeriod: the pod's deletionGracePeriodSeconds while it is deleted,
    else the failed probe's own terminationGracePeriodSeconds for a probe kill, else the pod's
    terminationGracePeriodSeconds (2 s when none is known)."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionGracePeriodSeconds") is not None:
        return int(meta["deletionGracePeriodSeconds"])
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    if grace is None:
        return MIN_GRACE
    probe = {REASON_STARTUP: "startupProbe", REASON_LIVENESS: "livenessProbe"}.get(reason)
    if probe and container is not None:
        own = (container.get(probe) or {}).get("terminationGracePeriodSeconds")
        if own is not None:
            return int(own)
    return int(grace)


class TerminationOrdering:
    """Who waits for whom when a pod with sidecars stops: each sidecar waits for every app container
    and for the sidecars declared after it (upstream's newTerminationOrdering)."""

    def __init__(self, pod: dict[str, Any], running: list[str]) -> None:
        self._done: dict[str, asyncio.Event] = {}
        self._waits_for: dict[str, list[asyncio.Event]] = {}
        mains = []
        for c in app_containers(pod):
            mains.append(self._event(c["name"], running))
        later: str = ""
        for c in reversed(init_containers(pod)):
            self._event(c["name"], running)
            if is_sidecar(c):
                self._waits_for[c["name"]] = [*mains, *([self._done[later]] if later else [])]
                later = c["name"]

    def _event(self, name: str, running: list[str]) -> asyncio.Event:
        event = self._done[name] = asyncio.Event()
        if name not in running:
            event.set()
        return event

    async def wait_for_turn(self, name: str, grace: float) -> float:
        """Wait (at most `grace` seconds) until those this container waits for have stopped; the
        seconds waited."""
        started = time.monotonic()
        waits = [e.wait() for e in self._waits_for.get(name, []) if not e.is_set()]
        if waits and grace > 0:
            try:
                await asyncio.wait_for(asyncio.gather(*waits), timeout=grace)
            except TimeoutError:
                pass
        return time.monotonic() - started

    def terminated(self, name: str) -> None:
        if name in self._done:
            self._done[name].set()


async def run_pre_stop(
    runtime: RuntimeService,
    recorder: EventRecorder,
    pod: dict[str, Any],
    container: dict[str, Any],
    container_id: str,
    grace: int,
    pod_ip: str,
) -> int:
    """Run the preStop hook for at most `grace` seconds; the whole seconds it took. A failure is a
    FailedPreStopHook event with upstream's fixed text, never the hook's output (which may hold secrets)."""
    handler = (container.get("lifecycle") or {}).get("preStop") or {}
    started = time.monotonic()
    try:
        failure = await asyncio.wait_for(
            runtime.run_hook(pod, container, container_id, handler, pod_ip, grace), grace
        )
    except TimeoutError:
        log.info(
            "preStop hook not completed in grace period pod=%s container=%s grace=%ds",
            pod["metadata"]["name"],
            container["name"],
            grace,
        )
        failure = None
    if failure is not None:
        log.info("preStop hook failed pod=%s container=%s", pod["metadata"]["name"], container["name"])
        recorder.event(
            pod, WARNING, "FailedPreStopHook", "PreStopHook failed", field_of(pod, container["name"])
        )
    return int(time.monotonic() - started)


async def kill_container(
    runtime: RuntimeService,
    recorder: EventRecorder,
    pod: dict[str, Any] | None,
    record: ContainerRecord,
    message: str = "",
    reason: str = "",
    grace_override: int | None = None,
    ordering: TerminationOrdering | None = None,
    pod_ip: str = "",
) -> None:
    """upstream's killContainer: Killing event, grace period, preStop, the wait for its turn, then
    StopContainer with what is left (at least 2 s). `pod` is None for a pod nobody knows any more (an
    orphan in the runtime): then only the override applies, and nothing is reported."""
    spec = container_spec(pod, record.name) if pod is not None else None
    grace = termination_grace(pod, spec, reason) if pod is not None else MIN_GRACE
    if pod is not None:
        recorder.event(
            pod, NORMAL, "Killing", message or f"Stopping container {record.name}", field_of(pod, record.name)
        )
    if grace_override is not None:
        grace = grace_override
    if pod is not None and spec is not None and ((spec.get("lifecycle") or {}).get("preStop")) and grace > 0:
        grace -= await run_pre_stop(runtime, recorder, pod, spec, record.id, grace, pod_ip)
    if ordering is not None and grace > 0:
        grace -= int(await ordering.wait_for_turn(record.name, grace))
    grace = max(MIN_GRACE, grace)
    log.info("killing container container=%s id=%s grace=%ds", record.name, record.id[:13], grace)
    try:
        await runtime.stop_container(record.id, grace)
    finally:
        if ordering is not None:
            ordering.terminated(record.name)


async def kill_pod(
    runtime: RuntimeService,
    recorder: EventRecorder,
    pod: dict[str, Any] | None,
    rt: PodRuntime,
    grace_override: int | None = None,
    pod_ip: str = "",
) -> None:
    """upstream's killPodWithSyncResult: every running container at once (sidecars in their turn), then
    every sandbox."""
    running = rt.running()
    ordering = (
        TerminationOrdering(pod, [r.name for r in running]) if pod is not None and has_sidecars(pod) else None
    )
    results = await asyncio.gather(
        *(
            kill_container(runtime, recorder, pod, rec, "", "", grace_override, ordering, pod_ip)
            for rec in running
        ),
        return_exceptions=True,
    )
    for sb in rt.sandboxes:
        if sb.ready:
            await runtime.stop_sandbox(sb.id)
    for result in results:
        if isinstance(result, BaseException):
            raise result
