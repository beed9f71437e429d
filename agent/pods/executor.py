"""Carrying out a PodActions as upstream's SyncPod does (kuberuntime_manager.go): kill what must go
(the whole pod when its sandbox changed), make the new sandbox, then start init containers in order and
app containers, each under crash-loop backoff; postStart right after a start.

Every start failure lands in the worker's reason cache (`waiting`), which the status shows as the
container's waiting reason, as upstream's reasonCache; a start that works clears it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agent.pods import labels as L
from agent.pods.actions import REASON_POST_START, PodActions
from agent.pods.backoff import BackoffTable, format_go_duration, stable_key
from agent.pods.events import NORMAL, WARNING, EventRecorder, container_field, field_of
from agent.pods.killing import kill_container, kill_pod
from agent.pods.runtime import ContainerRecord, PodRuntime, SandboxRecord
from agent.pods.runtime_service import RuntimeService, SandboxError, StartError
from agent.pods.spec import app_containers, ephemeral_containers, init_containers, is_sidecar, pod_ref

log = logging.getLogger("agent.pods.executor")

RETRY_AFTER_ERROR = 5.0


@dataclass
class Applied:
    acted: bool = False  # something changed in the runtime: look again at once
    retry_in: float | None = None  # when a start held back (backoff, an error) is worth trying again

    def later(self, seconds: float) -> None:
        self.retry_in = seconds if self.retry_in is None else min(self.retry_in, seconds)


def crash_backoff_wait(
    table: BackoffTable, pod: dict[str, Any], container: dict[str, Any], rt: PodRuntime
) -> tuple[float, str]:
    """upstream's doBackOff for the container's newest exited instance: (seconds still to wait, the
    CrashLoopBackOff message) while its window, counted from when it exited, runs; (0, "") to start now,
    which records the try. Keyed by the container's hash, so a changed image starts at once."""
    exited = next((r for r in rt.containers.get(container["name"], []) if r.state == "exited"), None)
    if exited is None:
        return 0.0, ""
    key = stable_key(pod, container, L.container_hash(container))
    finished = exited.finished_at / 1e9
    wait = table.remaining_since(key, finished)
    if wait > 0:
        delay = format_go_duration(table.delay(key))
        return wait, f"back-off {delay} restarting failed container={container['name']} pod={pod_ref(pod)}"
    table.next(key, finished)
    return 0.0, ""


def pod_ip_of(pod: dict[str, Any], rt: PodRuntime) -> str:
    sb = rt.latest_sandbox
    if sb is not None and sb.ip:
        return sb.ip
    return (pod.get("status") or {}).get("podIP", "")


async def apply_actions(
    runtime: RuntimeService,
    recorder: EventRecorder,
    backoff: BackoffTable,
    waiting: dict[str, tuple[str, str]],
    pod: dict[str, Any],
    rt: PodRuntime,
    actions: PodActions,
) -> Applied:
    applied = Applied()
    pod_ip = pod_ip_of(pod, rt)
    if actions.create_sandbox and actions.sandbox_id:
        recorder.event(
            pod, NORMAL, "SandboxChanged", "Pod sandbox changed, it will be killed and re-created."
        )
    if actions.kill_pod:
        if rt.running() or any(sb.ready for sb in rt.sandboxes):
            applied.acted = True
        await kill_pod(runtime, recorder, pod, rt, None, pod_ip)
        if actions.create_sandbox:
            # The new sandbox starts over from the first init container (upstream's purgeInitContainers).
            for c in init_containers(pod):
                for rec in rt.containers.get(c["name"], []):
                    await runtime.remove_container(rec)
                rt.containers.pop(c["name"], None)
    else:
        for kill in actions.containers_to_kill.values():
            applied.acted = True
            await kill_container(
                runtime, recorder, pod, kill.record, kill.message, kill.reason, None, None, pod_ip
            )
    sandbox = next((sb for sb in rt.sandboxes if sb.id == actions.sandbox_id), None)
    if actions.create_sandbox:
        applied.acted = True
        try:
            sandbox = await runtime.run_sandbox(pod, actions.attempt)
        except SandboxError as err:
            recorder.event(
                pod, WARNING, "FailedCreatePodSandBox", f"Failed to create pod sandbox: {err.message}"
            )
            applied.later(RETRY_AFTER_ERROR)
            return applied
    if sandbox is None:
        return applied
    inits, apps = init_containers(pod), app_containers(pod)
    for idx in actions.init_to_start:
        started = await _start(
            runtime, recorder, backoff, waiting, pod, rt, inits[idx], "init", sandbox, applied
        )
        if not started and not is_sidecar(inits[idx]):
            return applied  # the next init container waits for this one
    if not actions.kill_pod:
        ephemeral = ephemeral_containers(pod)
        for idx in actions.ephemeral_to_start:
            await _start(
                runtime, recorder, backoff, waiting, pod, rt, ephemeral[idx], "ephemeral", sandbox, applied
            )
    for idx in actions.containers_to_start:
        await _start(runtime, recorder, backoff, waiting, pod, rt, apps[idx], "app", sandbox, applied)
    return applied


async def _start(
    runtime: RuntimeService,
    recorder: EventRecorder,
    backoff: BackoffTable,
    waiting: dict[str, tuple[str, str]],
    pod: dict[str, Any],
    rt: PodRuntime,
    container: dict[str, Any],
    kind: str,
    sandbox: SandboxRecord,
    applied: Applied,
) -> bool:
    """One container start as upstream's start helper and startContainer: backoff, restart count (from
    the newest instance, else the log folder), the runtime's start, postStart. True when it runs."""
    name = container["name"]
    wait, message = crash_backoff_wait(backoff, pod, container, rt)
    if wait > 0:
        waiting[name] = ("CrashLoopBackOff", message)
        recorder.event(
            pod,
            WARNING,
            "BackOff",
            f"Back-off restarting failed container {name} in pod {pod_ref(pod)}",
            field_of(pod, name),
        )
        applied.later(wait)
        return False
    latest = rt.latest(name)
    restart_count = (
        latest.restart_count + 1 if latest is not None else await runtime.logged_restarts(pod, name)
    )
    try:
        cid = await runtime.start_container(pod, container, kind, sandbox, restart_count)
    except StartError as err:
        # Shown as the waiting reason until the next try, which the error's own delay decides.
        waiting[name] = (err.reason, err.message)
        applied.later(err.retry_in)
        return False
    applied.acted = True
    waiting.pop(name, None)
    hook = (container.get("lifecycle") or {}).get("postStart")
    if not hook:
        return True
    failure = await runtime.run_hook(pod, container, cid, hook, sandbox.ip)
    if failure is None:
        return True
    # Upstream: the event names no output (it may hold secrets); the status message keeps the details.
    field = container_field(kind, name)
    recorder.event(pod, WARNING, "FailedPostStartHook", "PostStartHook failed", field)
    record = ContainerRecord(
        cid,
        name,
        kind,
        sandbox.id,
        restart_count,
        L.container_hash(container),
        "running",
        0,
        0,
        0,
        0,
        "",
        "",
        container.get("image", ""),
        "",
        "",
    )
    await kill_container(
        runtime, recorder, pod, record, "FailedPostStartHook", REASON_POST_START, None, None, sandbox.ip
    )
    waiting[name] = ("PostStartHookError", failure)
    return False
