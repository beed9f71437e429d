"""The pod's status from its spec, what CRI reports and the last status written: phase, container
statuses and conditions, with upstream's rules, reasons and messages (pkg/kubelet/kubelet_pods.go
convertToAPIContainerStatuses, getPhase and generateAPIPodStatus; the probe verdicts as
prober_manager.go's UpdatePodStatus folds them in; the final defaults of status_manager.go's
TerminatePod).

Pure functions, so each rule is tested on its own. `waiting` is upstream's reason cache: why the last
start of a container failed (ErrImagePull, CrashLoopBackOff, ...), which CRI cannot know.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agent.pods.conditions import TERMINAL, ConditionInputs, generate_conditions
from agent.pods.qos import qos_class
from agent.pods.runtime import ContainerRecord, PodRuntime
from agent.pods.spec import app_containers, ephemeral_containers, init_containers, is_sidecar, restart_policy

STATUS_UNKNOWN = "ContainerStatusUnknown"
UNKNOWN_TERMINATED = "The container could not be located when the pod was terminated"
UNKNOWN_DELETED = (
    "The container could not be located when the pod was deleted.  The container used to be Running"
)


@dataclass
class StatusInputs:
    pod: dict[str, Any]
    runtime: PodRuntime
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    host_ip: str = ""
    runtime_name: str = "containerd"
    terminal: bool = False  # upstream's podIsTerminal: the pod's containers will not be started again
    # Probe verdicts for running containers, by name; a container missing from either has no such probe.
    readiness: dict[str, bool] = field(default_factory=dict)
    started: dict[str, bool] = field(default_factory=dict)
    failure: tuple[str, str] | None = None  # the agent fails the pod itself (deadline): (reason, message)
    previous: dict[str, Any] | None = None  # the last status the kubelet made (else the API's)
    now: str = ""


def rfc3339(ns: int) -> str | None:
    if ns <= 0:
        return None
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def should_restart(policy: str, exit_code: int) -> bool:
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def container_should_be_restarted(container: dict[str, Any], pod: dict[str, Any], rt: PodRuntime) -> bool:
    """upstream's ShouldContainerBeRestarted: never once the pod is being deleted; a container that
    never ran, or is created or unknown, starts; an exited one as the restart policy says (sidecars
    always)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    rec = rt.latest(container["name"])
    if rec is None:
        return True
    if rec.state == "running":
        return False
    if rec.state in ("unknown", "created"):
        return True
    if is_sidecar(container):
        return True
    return should_restart(restart_policy(pod), rec.exit_code)


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


def _unknown(message: str) -> dict[str, Any]:
    return {
        "terminated": {
            "exitCode": 137,
            "reason": STATUS_UNKNOWN,
            "message": message,
            "startedAt": None,
            "finishedAt": None,
        }
    }


def _waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def volume_mount_statuses(container: dict[str, Any]) -> list[dict[str, Any]]:
    """containerStatuses[].volumeMounts as 1.32 reports them (RecursiveReadOnlyMounts, beta): each
    mount's name, path and readOnly, a read-only one with recursiveReadOnly Disabled (this runtime
    offers no recursive read-only mounts, so IfPossible resolves to Disabled)."""
    out = []
    for m in container.get("volumeMounts") or []:
        item: dict[str, Any] = {"name": m.get("name", ""), "mountPath": m.get("mountPath", "")}
        if m.get("readOnly"):
            item["readOnly"] = True
            item["recursiveReadOnly"] = "Disabled"
        out.append(item)
    return out


def _from_record(rec: ContainerRecord, old: dict[str, Any] | None, inp: StatusInputs) -> dict[str, Any]:
    """upstream's convertContainerStatus: one runtime container as an API container status."""
    st: dict[str, Any] = {
        "name": rec.name,
        "state": {},
        "lastState": {},
        "ready": False,
        "restartCount": rec.restart_count,
        "image": rec.image,
        "imageID": rec.image_ref,
        "containerID": f"{inp.runtime_name}://{rec.id}",
        "started": False,
    }
    if old is not None and old.get("volumeMounts"):
        st["volumeMounts"] = copy.deepcopy(old["volumeMounts"])  # immutable once reported
    if rec.state == "running":
        st["state"] = {"running": {"startedAt": rfc3339(rec.started_at)}}
    elif rec.state == "created":
        st["state"] = {"waiting": {}}
    elif rec.state == "exited":
        st["state"] = {"terminated": _terminated(rec, inp.runtime_name)}
    elif old is not None and "running" in (old.get("state") or {}):
        # It ran, and the runtime no longer knows how it ended: it did not succeed.
        st["state"] = _unknown(UNKNOWN_TERMINATED)
        st["restartCount"] = int(old.get("restartCount") or 0) + 1
    else:
        st["state"] = {"waiting": {}}
    return st


def container_statuses(
    inp: StatusInputs, specs: list[dict[str, Any]], previous: list[dict[str, Any]], is_init: bool
) -> list[dict[str, Any]]:
    """upstream's convertToAPIContainerStatuses, then the probe verdicts (UpdatePodStatus). Init
    container statuses come in spec order, app container statuses sorted by name."""
    pod, rt = inp.pod, inp.runtime
    default = _waiting("PodInitializing" if init_containers(pod) else "ContainerCreating")
    old = {s.get("name"): s for s in previous}
    statuses: dict[str, dict[str, Any]] = {}
    for c in specs:
        st: dict[str, Any] = {
            "name": c["name"],
            "state": copy.deepcopy(default),
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": c.get("image", ""),
            "imageID": "",
            "started": False,
        }
        if mounts := volume_mount_statuses(c):
            st["volumeMounts"] = mounts
        prev = old.get(c["name"])
        if prev is not None:
            if "terminated" in (prev.get("state") or {}):
                st = copy.deepcopy(prev)
            else:
                st["restartCount"] = int(prev.get("restartCount") or 0)
                st["lastState"] = copy.deepcopy(prev.get("lastState") or {})
        statuses[c["name"]] = st
    for c in specs:
        prev = old.get(c["name"])
        if rt.containers.get(c["name"]) or prev is None or "running" not in (prev.get("state") or {}):
            continue
        st = statuses[c["name"]]
        if st["state"] != default or "terminated" in st["lastState"]:
            continue
        # It ran, and the runtime has lost it: count it as ended, so the pod does not fall back to Pending.
        st["lastState"] = _unknown(UNKNOWN_DELETED)
        if not (pod.get("metadata") or {}).get("deletionTimestamp"):
            st["restartCount"] += 1
    for c in specs:
        records = rt.containers.get(c["name"]) or []
        if records:
            statuses[c["name"]] = _from_record(records[0], old.get(c["name"]), inp)
        if len(records) > 1:
            statuses[c["name"]]["lastState"] = _from_record(records[1], old.get(c["name"]), inp)["state"]
    for c in specs:
        latest = rt.latest(c["name"])
        if is_init and latest is not None and latest.state == "exited" and latest.exit_code == 0:
            continue
        if not container_should_be_restarted(c, pod, rt) or c["name"] not in inp.waiting:
            continue
        st = statuses[c["name"]]
        if "terminated" in st["state"]:
            st["lastState"] = st["state"]
        st["state"] = _waiting(*inp.waiting[c["name"]])
    for c in specs:
        _apply_probes(statuses[c["name"]], c, is_init, inp)
    ordered = [statuses[c["name"]] for c in specs]
    return ordered if is_init else sorted(ordered, key=lambda s: s["name"])


def _apply_probes(st: dict[str, Any], container: dict[str, Any], is_init: bool, inp: StatusInputs) -> None:
    running = "running" in st["state"]
    st["started"] = running and inp.started.get(st["name"], True)
    if is_init and not is_sidecar(container):
        done = st["state"].get("terminated")
        st["ready"] = bool(done) and done.get("exitCode") == 0
        return
    st["ready"] = st["started"] and inp.readiness.get(st["name"], True)


def pod_phase(
    pod: dict[str, Any], statuses: list[dict[str, Any]], terminal: bool, initialized: bool = False
) -> str:
    """upstream's getPhase. A running sidecar counts as running, so a pod whose app containers have
    ended stays Running until its sidecars stop; a regular init container that runs or waits keeps the
    pod Pending (also when init containers run again in a new sandbox)."""
    by_name = {s["name"]: s for s in statuses}
    policy = restart_policy(pod)
    pending_regular = pending_sidecar = failed_init = 0
    unknown = running = waiting = stopped = succeeded = 0
    for c in init_containers(pod):
        st = by_name.get(c["name"])
        state, last = (st["state"], st["lastState"]) if st else ({}, {})
        if is_sidecar(c):
            if st is None:
                unknown += 1
            elif "running" in state:
                pending_sidecar += 0 if st.get("started") else 1
                running += 1
            elif "terminated" in state:
                pass
            elif "waiting" in state:
                if "terminated" not in last:
                    pending_sidecar += 1
                    waiting += 1
            else:
                pending_sidecar += 1
                unknown += 1
            continue
        if st is None or "running" in state:
            pending_regular += 1
        elif "terminated" in state:
            failed_init += state["terminated"].get("exitCode") != 0
        elif "waiting" in state:
            if "terminated" in last:
                failed_init += last["terminated"].get("exitCode") != 0
            else:
                pending_regular += 1
        else:
            pending_regular += 1
    for c in app_containers(pod):
        st = by_name.get(c["name"])
        if st is None:
            unknown += 1
            continue
        state, last = st["state"], st["lastState"]
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode") == 0
        elif "waiting" in state:
            if "terminated" in last:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if failed_init and policy == "Never":
        return "Failed"
    if pending_regular or (pending_sidecar and not initialized) or waiting:
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


def _pod_ips(inp: StatusInputs, previous: dict[str, Any]) -> tuple[str, list[str]]:
    spec = inp.pod.get("spec") or {}
    sandbox = inp.runtime.latest_sandbox
    if spec.get("hostNetwork"):
        return inp.host_ip, [inp.host_ip] if inp.host_ip else []
    if sandbox is not None and sandbox.ready and sandbox.ip:
        return sandbox.ip, [sandbox.ip, *sandbox.ips]
    # A stopped sandbox reports no IP; the pod keeps the one it had (upstream's preserveDataFromBeforeStopping).
    if previous.get("podIP"):
        return previous["podIP"], [p.get("ip", "") for p in previous.get("podIPs") or []]
    return "", []


def compute_status(inp: StatusInputs) -> dict[str, Any]:
    """upstream's generateAPIPodStatus."""
    pod = inp.pod
    api = pod.get("status") or {}
    previous = inp.previous if inp.previous is not None else api
    now = inp.now or now_rfc3339()
    init_specs, app_specs = init_containers(pod), app_containers(pod)
    inits = container_statuses(inp, init_specs, previous.get("initContainerStatuses") or [], True)
    apps = container_statuses(inp, app_specs, previous.get("containerStatuses") or [], False)
    ephemeral_specs = ephemeral_containers(pod)
    ephemeral = container_statuses(
        inp, ephemeral_specs, previous.get("ephemeralContainerStatuses") or [], False
    )
    active = {r.name for r in inp.runtime.active()}
    initialized = any(c["name"] in active for c in app_specs)
    phase = pod_phase(pod, [*inits, *apps], inp.terminal, initialized)
    if phase not in TERMINAL:
        if previous.get("phase") in TERMINAL:
            phase = previous["phase"]
        elif api.get("phase") in TERMINAL:
            phase = api["phase"]
    reason = message = ""
    if phase == previous.get("phase"):
        reason = previous.get("reason") or api.get("reason") or ""
        message = previous.get("message") or api.get("message") or ""
    if inp.failure is not None:
        phase, (reason, message) = "Failed", inp.failure
    if api.get("phase") in TERMINAL:
        phase = api["phase"]  # terminal phases never change
    others = [c for c in api.get("conditions") or []]
    conditions = generate_conditions(
        ConditionInputs(pod, inp.runtime, [*inits, *apps], phase, others),
        previous.get("conditions") or [],
        now,
    )
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": inp.host_ip,
        "hostIPs": [{"ip": inp.host_ip}] if inp.host_ip else [],
        "startTime": previous.get("startTime") or api.get("startTime") or now,
        "qosClass": qos_class(pod),
        "containerStatuses": apps,
    }
    if init_specs:
        status["initContainerStatuses"] = inits
    if ephemeral_specs:
        status["ephemeralContainerStatuses"] = ephemeral
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    pod_ip, pod_ips = _pod_ips(inp, previous)
    if pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": ip} for ip in pod_ips if ip]
    return status


def _initialized_prefix(statuses: list[dict[str, Any]]) -> int:
    """How many init container statuses (from the first) ever tried to start: all but the suffix still
    waiting for a first start, and at least one (upstream's initializedContainers)."""
    for i in range(len(statuses) - 1, -1, -1):
        if "waiting" not in statuses[i]["state"] or "terminated" in statuses[i]["lastState"]:
            return i + 1
    return 1 if statuses else 0


def _has_initialized(pod: dict[str, Any], status: dict[str, Any]) -> bool:
    """upstream's hasPodInitialized: no init containers, an app container ever left waiting, or the
    last init container exited 0."""
    inits = init_containers(pod)
    if not inits:
        return True
    for cs in status.get("containerStatuses") or []:
        if "terminated" in (cs.get("lastState") or {}) or "waiting" not in (cs.get("state") or {}):
            return True
    last = next(
        (s for s in status.get("initContainerStatuses") or [] if s["name"] == inits[-1]["name"]), None
    )
    done = ((last or {}).get("state") or {}).get("terminated")
    return bool(done) and done.get("exitCode") == 0


def terminate_pod(pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """upstream's TerminatePod, the pod's last status: every container that did not report an end
    counts as failed (ContainerStatusUnknown, 137) once the pod had initialized, so do init containers
    that had started, and a pod still Pending or Running ends Failed (a deleted Pending pod too)."""
    out = copy.deepcopy(status)
    if _has_initialized(pod, out):
        for cs in out.get("containerStatuses") or []:
            if "terminated" not in cs["state"]:
                cs["state"] = _unknown(UNKNOWN_TERMINATED)
    inits = out.get("initContainerStatuses") or []
    for cs in inits[: _initialized_prefix(inits)]:
        if "terminated" not in cs["state"]:
            cs["state"] = _unknown(UNKNOWN_TERMINATED)
    if out.get("phase") not in TERMINAL:
        out["phase"] = "Failed"
    return out
