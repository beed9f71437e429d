"""The pod's status from its spec and what CRI reports: phase, conditions and container statuses, with
upstream's rules, reasons and messages (pkg/kubelet/kubelet_pods.go getPhase and friends).

Pure functions, so each rule is tested on its own. `waiting` carries the reasons the worker hit while
acting (ErrImagePull, CrashLoopBackOff, ...), which CRI cannot know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.pods.qos import qos_class
from agent.pods.runtime import ContainerRecord, PodRuntime

TERMINAL = ("Succeeded", "Failed")
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


@dataclass
class StatusInputs:
    pod: dict[str, Any]
    runtime: PodRuntime
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    host_ip: str = ""
    runtime_name: str = "containerd"
    terminal: bool = False  # the agent stopped the pod for good (deletion, or a finished pod)
    # Probe verdicts for running containers, by name; a container missing from either has no such probe.
    readiness: dict[str, bool] = field(default_factory=dict)
    started: dict[str, bool] = field(default_factory=dict)
    failure: tuple[str, str] | None = None  # the agent failed the pod itself: (reason, message)
    now: str = ""


def rfc3339(ns: int) -> str | None:
    if ns <= 0:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminated(rec: ContainerRecord, runtime_name: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "exitCode": rec.exit_code,
        "reason": rec.reason or ("Completed" if rec.exit_code == 0 else "Error"),
        "startedAt": rfc3339(rec.started_at),
        "finishedAt": rfc3339(rec.finished_at),
        "containerID": f"{runtime_name}://{rec.id}",
    }
    if rec.message:
        out["message"] = rec.message
    return out


def _gone(rec: ContainerRecord, runtime_name: str) -> dict[str, Any]:
    """A container that vanished or never reported an exit: upstream's ContainerStatusUnknown."""
    return {
        "exitCode": 137,
        "reason": "ContainerStatusUnknown",
        "message": "The container could not be located when the pod was terminated",
        "startedAt": rfc3339(rec.started_at),
        "finishedAt": rfc3339(rec.finished_at),
        "containerID": f"{runtime_name}://{rec.id}",
    }


def container_status(
    spec: dict[str, Any],
    records: list[ContainerRecord],
    waiting: tuple[str, str] | None,
    default_waiting: str,
    inp: StatusInputs,
) -> dict[str, Any]:
    name = spec["name"]
    status: dict[str, Any] = {
        "name": name,
        "state": {},
        "lastState": {},
        "ready": False,
        "restartCount": 0,
        "image": spec.get("image", ""),
        "imageID": "",
        "started": False,
    }
    if not records:
        reason, message = waiting or (default_waiting, "")
        status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        return status
    latest = records[0]
    status["restartCount"] = latest.restart_count
    status["image"] = latest.image or spec.get("image", "")
    status["imageID"] = latest.image_ref
    status["containerID"] = f"{inp.runtime_name}://{latest.id}"
    previous = next((r for r in records[1:] if r.state == "exited"), None)
    if previous is not None:
        status["lastState"] = {"terminated": _terminated(previous, inp.runtime_name)}
    if latest.state == "running":
        if inp.terminal:
            status["state"] = {"terminated": _gone(latest, inp.runtime_name)}
        else:
            status["state"] = {"running": {"startedAt": rfc3339(latest.started_at)}}
            status["started"] = inp.started.get(name, True)
            status["ready"] = status["started"] and inp.readiness.get(name, True)
    elif latest.state == "exited":
        term = {"terminated": _terminated(latest, inp.runtime_name)}
        if waiting and not inp.terminal and _restarts(spec, latest, inp.pod):
            # As upstream's reason cache: why the next start failed shows only if there will be one.
            status["lastState"] = term
            status["state"] = {"waiting": {"reason": waiting[0], **({"message": waiting[1]} if waiting[1] else {})}}
        else:
            status["state"] = term
    elif inp.terminal:
        status["state"] = {"terminated": _gone(latest, inp.runtime_name)}
    else:
        reason, message = waiting or ("ContainerCreating", "")
        status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return status


def _restarts(spec: dict[str, Any], latest: ContainerRecord, pod: dict[str, Any]) -> bool:
    """Whether the agent will start this exited container again (upstream's ShouldContainerBeRestarted)."""
    if is_sidecar(spec):
        return True
    return should_restart((pod.get("spec") or {}).get("restartPolicy") or "Always", latest.exit_code)


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def is_sidecar(container: dict[str, Any]) -> bool:
    """An init container with restartPolicy Always (a sidecar: started in order, then kept running)."""
    return container.get("restartPolicy") == "Always"


def pod_phase(
    pod: dict[str, Any],
    init: list[dict[str, Any]],
    app: list[dict[str, Any]],
    terminal: bool,
    initialized: bool = False,
) -> str:
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    sidecars = {c["name"] for c in (pod.get("spec") or {}).get("initContainers") or [] if is_sidecar(c)}
    pending_init = failed_init = 0
    for cs in [] if initialized else init:
        state, last = cs["state"], cs["lastState"]
        if cs["name"] in sidecars:
            pending_init += 0 if "running" in state else 1
            continue
        if "running" in state:
            pending_init += 1
        elif "terminated" in state:
            if state["terminated"]["exitCode"] != 0:
                failed_init += 1
        elif "waiting" in state:
            if "terminated" in last and last["terminated"]["exitCode"] != 0:
                failed_init += 1
            elif "terminated" not in last:
                pending_init += 1
        else:
            pending_init += 1
    unknown = running = waiting = stopped = succeeded = 0
    for cs in app:
        state, last = cs["state"], cs["lastState"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            if state["terminated"]["exitCode"] == 0:
                succeeded += 1
        elif "waiting" in state:
            if "terminated" in last:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if failed_init and policy == "Never":
        return "Failed"
    if pending_init or (failed_init and policy != "Never") or waiting:
        return "Pending"
    if running and not unknown:
        return "Running"
    if not running and stopped and not unknown:
        if terminal:
            return "Succeeded" if stopped == succeeded else "Failed"
        if policy == "Always":
            return "Running"
        if stopped == succeeded:
            return "Succeeded"
        if policy == "Never":
            return "Failed"
        return "Running"
    return "Pending"


def _condition(type_: str, ok: bool, reason: str = "", message: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {"type": type_, "status": "True" if ok else "False", "lastProbeTime": None}
    if not ok and reason:
        cond["reason"] = reason
        if message:
            cond["message"] = message
    elif ok and reason == "PodCompleted":
        cond["reason"] = reason
    return cond


def _init_complete(c: dict[str, Any], rt: PodRuntime) -> bool:
    rec = rt.latest(c["name"])
    if rec is None:
        return False
    if is_sidecar(c):
        return rec.state == "running"
    return rec.state == "exited" and rec.exit_code == 0


def _unready_gates(spec: dict[str, Any], conditions: dict[str, dict[str, Any]]) -> list[str]:
    """Upstream's messages for readiness gates whose condition is missing or not True."""
    out = []
    for gate in spec.get("readinessGates") or []:
        kind = gate.get("conditionType", "")
        cond = conditions.get(kind)
        if cond is None:
            out.append(f'corresponding condition of pod readiness gate "{kind}" does not exist.')
        elif cond.get("status") != "True":
            out.append(f'the status of pod readiness gate "{kind}" is not "True", but {cond.get("status")}')
    return out


def _names(names: list[str]) -> str:
    return "[" + " ".join(names) + "]"


def compute_status(inp: StatusInputs) -> dict[str, Any]:
    pod = inp.pod
    spec = pod.get("spec") or {}
    previous = pod.get("status") or {}
    rt = inp.runtime
    now = inp.now or now_rfc3339()
    init_specs = list(spec.get("initContainers") or [])
    app_specs = list(spec.get("containers") or [])
    app_started = any(rt.containers.get(c["name"]) for c in app_specs)
    init_done = app_started or all(_init_complete(c, rt) for c in init_specs)
    init_statuses = [
        container_status(c, rt.containers.get(c["name"], []), inp.waiting.get(c["name"]), "PodInitializing", inp)
        for c in init_specs
    ]
    for c, cs in zip(init_specs, init_statuses, strict=True):
        if not is_sidecar(c):
            # Upstream: a regular init container is ready once it has exited 0, never while it runs.
            done = cs["state"].get("terminated")
            cs["ready"] = bool(done) and done.get("exitCode") == 0
    app_default = "ContainerCreating" if init_done else "PodInitializing"
    app_statuses = [
        container_status(c, rt.containers.get(c["name"], []), inp.waiting.get(c["name"]), app_default, inp)
        for c in app_specs
    ]
    phase = pod_phase(pod, init_statuses, app_statuses, inp.terminal, app_started)
    if inp.failure is not None:
        phase = "Failed"
    if previous.get("phase") in TERMINAL:
        phase = previous["phase"]  # terminal phases never change

    sandbox = rt.latest_sandbox
    net_ready = bool(sandbox and sandbox.ready and (sandbox.ip or sandbox.host_network)) and not inp.terminal
    incomplete = [c["name"] for c in init_specs if not app_started and not _init_complete(c, rt)]
    sidecar_names = {c["name"] for c in init_specs if is_sidecar(c)}
    unready = [cs["name"] for cs in init_statuses if cs["name"] in sidecar_names and not cs["ready"]]
    unready += [cs["name"] for cs in app_statuses if not cs["ready"]]
    if phase == "Succeeded":
        ready_cond = ("PodCompleted", "")
    else:
        ready_cond = ("ContainersNotReady", f"containers with unready status: {_names(unready)}")
    conditions = [
        _condition("PodReadyToStartContainers", net_ready),
        _condition(
            "Initialized",
            not incomplete,
            *(("PodCompleted", "") if phase == "Succeeded" and init_specs else
              ("ContainersNotInitialized", f"containers with incomplete status: {_names(incomplete)}")),
        ),
        _condition("Ready", not unready and phase not in TERMINAL, *ready_cond),
        _condition("ContainersReady", not unready and phase not in TERMINAL, *ready_cond),
    ]
    old = {c.get("type"): c for c in previous.get("conditions") or []}
    gates = _unready_gates(spec, old)
    if gates and conditions[2]["status"] == "True":
        conditions[2] = _condition("Ready", False, "ReadinessGatesNotReady", ", ".join(gates))
    for cond in conditions:
        prev = old.get(cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        cond["lastTransitionTime"] = prev.get("lastTransitionTime") if same else now
    conditions.append(old.get("PodScheduled") or {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now})
    # Conditions others own (readiness gates, DisruptionTarget, ...) are kept as they are.
    conditions += [c for t, c in old.items() if t not in KUBELET_CONDITIONS and t != "PodScheduled"]

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": inp.host_ip,
        "hostIPs": [{"ip": inp.host_ip}] if inp.host_ip else [],
        "startTime": previous.get("startTime") or now,
        "qosClass": previous.get("qosClass") or qos_class(pod),
        "containerStatuses": app_statuses,
    }
    if init_specs:
        status["initContainerStatuses"] = init_statuses
    if inp.failure is not None:
        status["reason"], status["message"] = inp.failure
    elif previous.get("phase") in TERMINAL and previous.get("reason"):
        status["reason"] = previous["reason"]
        if previous.get("message"):
            status["message"] = previous["message"]
    pod_ip = ""
    pod_ips: list[str] = []
    if spec.get("hostNetwork"):
        pod_ip, pod_ips = inp.host_ip, [inp.host_ip] if inp.host_ip else []
    elif sandbox is not None and sandbox.ip:
        pod_ip, pod_ips = sandbox.ip, [sandbox.ip, *sandbox.ips]
    elif previous.get("podIP"):
        pod_ip, pod_ips = previous["podIP"], [p.get("ip") for p in previous.get("podIPs") or []]
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": ip} for ip in pod_ips if ip]
    return status
