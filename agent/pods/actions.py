"""What a pod needs done, given its spec, what the runtime reports and the probe verdicts: a pure
function, as upstream's computePodActions and computeInitContainerActions
(pkg/kubelet/kuberuntime/kuberuntime_manager.go, kuberuntime_container.go).

Nothing here performs anything; agent/pods/executor.py carries a PodActions out. Being pure, every rule
(sandbox changes, init order, sidecars kept running, restarts by policy, kills for failed probes or a
changed definition) is tested without a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.pods import labels as L
from agent.pods.runtime import ContainerRecord, PodRuntime, sandbox_changed
from agent.pods.spec import app_containers, ephemeral_containers, init_containers, is_sidecar, restart_policy
from agent.pods.status import container_should_be_restarted

# Why a container is killed: decides which grace period it gets (upstream's containerKillReason).
REASON_STARTUP = "StartupProbe"
REASON_LIVENESS = "LivenessProbe"
REASON_POST_START = "FailedPostStartHook"
REASON_UNKNOWN = "Unknown"

SUCCESS = "success"
FAILURE = "failure"


class Verdicts(Protocol):
    """The prober's verdicts about a container ID: SUCCESS, FAILURE, or None when it has none yet."""

    def liveness(self, container_id: str) -> str | None: ...

    def startup(self, container_id: str) -> str | None: ...


class NoVerdicts:
    def liveness(self, container_id: str) -> str | None:
        return None

    def startup(self, container_id: str) -> str | None:
        return None


@dataclass(frozen=True)
class Kill:
    """A container to stop: its record, the Killing event's message and why (for the grace period)."""

    record: ContainerRecord
    message: str
    reason: str = ""


@dataclass
class PodActions:
    kill_pod: bool = False  # stop every running container and every sandbox
    create_sandbox: bool = False
    sandbox_id: str = ""  # the sandbox containers start in (the old one when a new one is made)
    attempt: int = 0
    init_to_start: list[int] = field(default_factory=list)  # indexes into spec.initContainers
    containers_to_start: list[int] = field(default_factory=list)  # indexes into spec.containers
    containers_to_kill: dict[str, Kill] = field(default_factory=dict)  # by container ID
    ephemeral_to_start: list[int] = field(default_factory=list)  # indexes into spec.ephemeralContainers

    def nothing(self) -> bool:
        return not (
            self.kill_pod
            or self.create_sandbox
            or self.init_to_start
            or self.containers_to_start
            or self.containers_to_kill
            or self.ephemeral_to_start
        )


def container_changed(container: dict[str, Any], rec: ContainerRecord) -> bool:
    """The running container was made from another definition (its name and image, upstream's hash)."""
    return bool(rec.hash) and rec.hash != L.container_hash(container)


def _init_failed(rec: ContainerRecord) -> bool:
    """upstream's isInitContainerFailed: exited non-zero, or in an unknown state."""
    return (rec.state == "exited" and rec.exit_code != 0) or rec.state == "unknown"


def compute_pod_actions(pod: dict[str, Any], rt: PodRuntime, verdicts: Verdicts) -> PodActions:
    check = sandbox_changed(pod, rt)
    actions = PodActions(
        kill_pod=check.changed,
        create_sandbox=check.changed,
        sandbox_id=check.sandbox_id,
        attempt=check.attempt,
    )
    if check.changed:
        return _for_new_sandbox(pod, rt, actions)
    # Ephemeral containers start even before the pod has initialized, once each: never restarted.
    actions.ephemeral_to_start = [
        i for i, c in enumerate(ephemeral_containers(pod)) if rt.latest(c["name"]) is None
    ]
    initialized = _init_actions(pod, rt, verdicts, actions)
    if actions.kill_pod or not initialized:
        return actions
    keep = 0
    policy = restart_policy(pod)
    for idx, c in enumerate(app_containers(pod)):
        rec = rt.latest(c["name"])
        if rec is None or rec.state != "running":
            if container_should_be_restarted(c, pod, rt):
                actions.containers_to_start.append(idx)
                if rec is not None and rec.state == "unknown":
                    actions.containers_to_kill[rec.id] = Kill(
                        rec,
                        f'Container is in "{rec.state}" state, try killing it before restart',
                        REASON_UNKNOWN,
                    )
            continue
        restart = policy != "Never"
        if container_changed(c, rec):
            message, reason, restart = f"Container {c['name']} definition changed", "", True
        elif verdicts.liveness(rec.id) == FAILURE:
            message, reason = f"Container {c['name']} failed liveness probe", REASON_LIVENESS
        elif verdicts.startup(rec.id) == FAILURE:
            message, reason = f"Container {c['name']} failed startup probe", REASON_STARTUP
        else:
            keep += 1
            continue
        if restart:
            message += ", will be restarted"
            actions.containers_to_start.append(idx)
        actions.containers_to_kill[rec.id] = Kill(rec, message, reason)
    if keep == 0 and not actions.containers_to_start:
        # Nothing of the pod runs or will run again: stop it all, sidecars included, and start none.
        actions.kill_pod = True
        actions.init_to_start = []
        actions.ephemeral_to_start = []
    return actions


def _for_new_sandbox(pod: dict[str, Any], rt: PodRuntime, actions: PodActions) -> PodActions:
    """A new sandbox: everything is stopped and the pod starts over from its first init container,
    unless the pod has run and will not restart (Never), or has nothing left to start."""
    if restart_policy(pod) == "Never" and actions.attempt != 0 and rt.all_containers():
        actions.create_sandbox = False
        return actions
    to_start = [
        idx
        for idx, c in enumerate(app_containers(pod))
        if not (restart_policy(pod) == "OnFailure" and _succeeded(c, rt))
    ]
    if not to_start and _any_regular_created(pod, rt):
        actions.create_sandbox = False
        return actions
    if init_containers(pod):
        actions.init_to_start = [0]
        return actions
    actions.containers_to_start = to_start
    return actions


def _succeeded(container: dict[str, Any], rt: PodRuntime) -> bool:
    rec = rt.latest(container["name"])
    return rec is not None and rec.state == "exited" and rec.exit_code == 0


def _any_regular_created(pod: dict[str, Any], rt: PodRuntime) -> bool:
    return any(
        (rec := rt.latest(c["name"])) is not None and rec.state in ("created", "running", "exited")
        for c in app_containers(pod)
    )


def _init_actions(pod: dict[str, Any], rt: PodRuntime, verdicts: Verdicts, actions: PodActions) -> bool:
    """upstream's computeInitContainerActions: start the first init container not yet started, keep
    sidecars running (restarted when they exit, fail a probe or change), restart failed init containers
    unless the policy is Never (then the pod is done). True when the pod has initialized."""
    inits = init_containers(pod)
    if not inits:
        return True
    initialized = any(
        (rec := rt.latest(c["name"])) is not None and rec.state in ("created", "running")
        for c in app_containers(pod)
    )
    previously = initialized
    restart_on_failure = restart_policy(pod) != "Never"
    for i in range(len(inits) - 1, -1, -1):
        c = inits[i]
        rec = rt.latest(c["name"])
        if rec is None:
            if previously and is_sidecar(c):
                actions.init_to_start.append(i)
            continue
        if previously and not is_sidecar(c):
            continue
        if rec.state == "created":
            actions.init_to_start.append(i)
        elif rec.state == "running":
            if is_sidecar(c):
                started = _sidecar_running(c, i, len(inits), rec, previously, verdicts, actions)
                initialized = initialized or started
        elif rec.state == "exited":
            if is_sidecar(c):
                actions.init_to_start.append(i)
            elif _init_failed(rec):
                if not restart_on_failure:
                    actions.kill_pod = True
                    actions.init_to_start = []
                    return False
                actions.init_to_start.append(i)
            elif i == len(inits) - 1:
                initialized = True
            else:
                actions.init_to_start.append(i + 1)
        else:  # unknown
            if not is_sidecar(c) and not restart_on_failure:
                actions.kill_pod = True
                actions.init_to_start = []
                return False
            actions.containers_to_kill[rec.id] = Kill(
                rec,
                f'Init container is in "{rec.state}" state, try killing it before restart',
                REASON_UNKNOWN,
            )
            actions.init_to_start.append(i)
        previously = True
    if not previously:
        actions.init_to_start.append(0)
    actions.init_to_start.reverse()
    return initialized


def _sidecar_running(
    c: dict[str, Any],
    i: int,
    count: int,
    rec: ContainerRecord,
    previously: bool,
    verdicts: Verdicts,
    actions: PodActions,
) -> bool:
    """A running sidecar: once started (its startup probe passed), the next init container may start;
    it is restarted when it fails its startup or liveness probe or its definition changed. True when it
    is the last init container and has started (the pod has initialized)."""
    if c.get("startupProbe"):
        startup = verdicts.startup(rec.id)
        if startup is None:
            return False  # wait for the startup probe's first verdict
        if startup != SUCCESS:
            actions.containers_to_kill[rec.id] = Kill(
                rec, f"Init container {c['name']} failed startup probe", REASON_STARTUP
            )
            actions.init_to_start.append(i)
            return False
    last = i == count - 1
    if not last and not previously:
        actions.init_to_start.append(i + 1)
    if container_changed(c, rec):
        actions.containers_to_kill[rec.id] = Kill(rec, f"Init container {c['name']} definition changed")
        actions.init_to_start.append(i)
        return last
    if c.get("livenessProbe") and verdicts.liveness(rec.id) == FAILURE:
        actions.containers_to_kill[rec.id] = Kill(
            rec, f"Init container {c['name']} failed liveness probe", REASON_LIVENESS
        )
        actions.init_to_start.append(i)
    return last
