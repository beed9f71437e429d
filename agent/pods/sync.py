"""The sync phase of a pod worker (upstream's Kubelet.SyncPod): look at the runtime once, write the
status that follows, and, unless the pod is done, decide what it needs (agent/pods/actions.py, pure) and
carry that out (agent/pods/executor.py).

A pod whose status comes out Succeeded or Failed is terminal: the worker moves on to terminating, which
stops whatever still runs (sidecars, the sandbox) before that phase reaches the API.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent.pods.actions import FAILURE, SUCCESS, compute_pod_actions
from agent.pods.conditions import TERMINAL
from agent.pods.context import PodContext
from agent.pods.events import NORMAL, WARNING
from agent.pods.executor import apply_actions, pod_ip_of
from agent.pods.gc import collect_dead
from agent.pods.podstate import PodState
from agent.pods.runtime import PodRuntime
from agent.pods.spec import host_network, init_containers, is_sidecar
from agent.pods.status import StatusInputs, compute_status
from agent.probes.manager import probed_containers
from agent.probes.podview import ContainerView
from agent.probes.result import Result
from agent.probes.spec import Kind
from agent.volumes.manager import limited_empty_dirs

log = logging.getLogger("agent.pods.sync")

RETRY_AFTER_ERROR = 5.0
DEADLINE_EXCEEDED = ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
EVICTED = "Evicted"
# How often local storage is measured for pods with a sized emptyDir (upstream's eviction monitoring).
EVICTION_MONITORING_PERIOD = 10.0


@dataclass
class SyncOutcome:
    terminal: bool = False  # the pod reached Succeeded/Failed: terminate it
    next_in: float = 0.0  # seconds until the next pass is worth it


def active_deadline_left(
    pod: dict[str, Any], now: datetime | None = None, status: dict[str, Any] | None = None
) -> float | None:
    """Seconds until spec.activeDeadlineSeconds runs out (counted from status.startTime), or None."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    start = (status or pod.get("status") or {}).get("startTime")
    if not deadline or not start:
        return None
    started = datetime.fromisoformat(start.replace("Z", "+00:00"))
    now = now or datetime.now(started.tzinfo)
    return started.timestamp() + int(deadline) - now.timestamp()


class ProberVerdicts:
    """The prober's results store as the decision reads it (upstream's liveness/startup managers)."""

    def __init__(self, ctx: PodContext, uid: str) -> None:
        self.prober = ctx.prober
        self.uid = uid

    def _get(self, kind: Kind, container_id: str) -> str | None:
        if self.prober is None:
            return None
        result = self.prober.results.get(kind, container_id)
        if result is Result.SUCCESS:
            return SUCCESS
        if result is Result.FAILURE:
            return FAILURE
        return None

    def liveness(self, container_id: str) -> str | None:
        return self._get(Kind.LIVENESS, container_id)

    def startup(self, container_id: str) -> str | None:
        return self._get(Kind.STARTUP, container_id)


def probe_inputs(
    ctx: PodContext, pod: dict[str, Any], rt: PodRuntime
) -> tuple[dict[str, bool], dict[str, bool]]:
    """started / ready of each running probed container, as the prober says now."""
    started: dict[str, bool] = {}
    ready: dict[str, bool] = {}
    prober = ctx.prober
    if prober is None:
        return started, ready
    uid = pod["metadata"]["uid"]
    for c in probed_containers(pod):
        rec = rt.latest(c["name"])
        if rec is not None and rec.state == "running":
            started[c["name"]] = prober.started(uid, c["name"], rec.id)
            ready[c["name"]] = started[c["name"]] and prober.ready(uid, c["name"], rec.id)
    return started, ready


def pod_status(
    ctx: PodContext, state: PodState, pod: dict[str, Any], rt: PodRuntime, terminal: bool
) -> dict[str, Any]:
    started, ready = probe_inputs(ctx, pod, rt) if not terminal else ({}, {})
    return compute_status(
        StatusInputs(
            pod=pod,
            runtime=rt,
            waiting=state.waiting,
            host_ip=ctx.host_ip(),
            runtime_name=ctx.runtime_name,
            terminal=terminal,
            readiness=ready,
            started=started,
            failure=state.failure,
            previous=ctx.status.last(state.uid),
        )
    )


def tell_prober(ctx: PodContext, pod: dict[str, Any], rt: PodRuntime) -> None:
    """Hand the prober what runs now, so its workers probe the right container at the right IP."""
    if ctx.prober is None:
        return
    sb = rt.latest_sandbox
    views: dict[str, ContainerView] = {}
    for c in probed_containers(pod):
        rec = rt.latest(c["name"], sb.id if sb is not None else None)
        if rec is not None:
            views[c["name"]] = ContainerView(rec.id, rec.state, rec.started_at / 1e9)
    ip = ctx.host_ip() if host_network(pod) else pod_ip_of(pod, rt)
    ctx.prober.sync_pod(pod, ip, views)


def rejected_status(pod: dict[str, Any], reason: str, message: str, now: str) -> dict[str, Any]:
    """upstream's rejectPod: Failed with the admission's reason and `Pod was rejected: <message>`."""
    from agent.pods.qos import qos_class

    return {
        "phase": "Failed",
        "reason": reason,
        "message": f"Pod was rejected: {message}",
        "qosClass": qos_class(pod),
        "startTime": (pod.get("status") or {}).get("startTime") or now,
    }


async def sync_pod(ctx: PodContext, state: PodState, pod: dict[str, Any]) -> SyncOutcome:
    if state.rejection is not None:
        from agent.pods.status import now_rfc3339

        await ctx.status.update(pod, rejected_status(pod, *state.rejection, now_rfc3339()))
        return SyncOutcome(terminal=True)
    rt = await ctx.service.pod_state(state.uid)
    deadline_in = active_deadline_left(pod, status=ctx.status.last(state.uid))
    if deadline_in is not None and deadline_in <= 0 and state.failure is None:
        state.failure = DEADLINE_EXCEEDED
        ctx.recorder.event(pod, NORMAL, *DEADLINE_EXCEEDED)
    watch_storage = bool(limited_empty_dirs(pod)) and state.failure is None
    if watch_storage and rt.running():
        await evict_if_over_limit(ctx, state, pod)
    status = pod_status(ctx, state, pod, rt, terminal=False)
    await ctx.status.update(pod, status)
    if status["phase"] in TERMINAL:
        log.info("pod is terminal pod=%s phase=%s", state.name, status["phase"])
        return SyncOutcome(terminal=True)
    tell_prober(ctx, pod, rt)
    actions = compute_pod_actions(pod, rt, ProberVerdicts(ctx, state.uid))
    next_in = ctx.cfg.sync_frequency
    if actions.nothing():
        await collect_dead(ctx.service, pod, rt)
        next_in = min(next_in, await ctx.service.refresh_volumes(pod))
    elif (
        actions.create_sandbox
        or actions.containers_to_start
        or actions.init_to_start
        or actions.ephemeral_to_start
    ) and not await ctx.service.prepare_volumes(pod):
        return SyncOutcome(next_in=RETRY_AFTER_ERROR)
    else:
        applied = await apply_actions(
            ctx.service, ctx.recorder, ctx.crash_backoff, state.waiting, pod, rt, actions
        )
        if applied.acted:
            next_in = 0.0
        else:  # held back (backoff): a pass that changed nothing is when dead containers go
            await collect_dead(ctx.service, pod, rt)
            next_in = min(next_in, await ctx.service.refresh_volumes(pod))
            if applied.retry_in is not None:
                next_in = min(next_in, applied.retry_in)
    if deadline_in is not None:
        next_in = min(next_in, max(deadline_in, 0.0))
    if watch_storage:
        next_in = min(next_in, EVICTION_MONITORING_PERIOD)
    return SyncOutcome(next_in=next_in)


async def evict_if_over_limit(ctx: PodContext, state: PodState, pod: dict[str, Any]) -> None:
    """upstream's localStorageEviction for an emptyDir over its sizeLimit: the pod fails with reason
    Evicted and the eviction manager's message, a Warning event says so, and its containers are killed
    with no grace period beyond the minimum (gracePeriodOverride 0)."""
    message = await ctx.service.local_storage_exceeded(pod)
    if message is None:
        return
    state.failure = (EVICTED, message)
    state.grace = 0
    ctx.recorder.event(pod, WARNING, EVICTED, message)
    log.info("pod evicted pod=%s message=%r", state.name, message)


def sidecar_names(pod: dict[str, Any]) -> set[str]:
    return {c["name"] for c in init_containers(pod) if is_sidecar(c)}
