"""The status a kubelet would write for a simulated pod in each of its states, in the kubelet's shape
(conditions by type, one status per container with its state, last state and restart count).

Sent as a strategic merge patch of pods/status: the conditions merge by type, so the scheduler's
PodScheduled condition stays as the scheduler wrote it.
"""

from __future__ import annotations

from typing import Any

from nodesim.stages import PodRecord

IMAGE_ID_PREFIX = "simulated://"


def _condition(kind: str, ok: bool, stamp: str, reason: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastTransitionTime": stamp}
    if reason:
        out["reason"] = reason
    return out


def _container_id(pod: dict[str, Any], name: str, restarts: int) -> str:
    uid = (pod.get("metadata") or {}).get("uid", "")
    return f"simulated://{uid[:8]}-{name}-{restarts}"


def _base(image: str, name: str) -> dict[str, Any]:
    return {"name": name, "image": image, "imageID": IMAGE_ID_PREFIX + image}


def _init_statuses(pod: dict[str, Any], stamp: str) -> list[dict[str, Any]]:
    out = []
    for c in (pod.get("spec") or {}).get("initContainers") or []:
        status = _base(c.get("image", ""), c["name"])
        status.update(
            state={
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": stamp,
                    "finishedAt": stamp,
                    "containerID": _container_id(pod, c["name"], 0),
                }
            },
            lastState={},
            ready=True,
            restartCount=0,
            started=False,
            containerID=_container_id(pod, c["name"], 0),
        )
        out.append(status)
    return out


def _last_state(pod: dict[str, Any], name: str, record: PodRecord) -> dict[str, Any]:
    if record.last_exit is None:
        return {}
    code, started, finished = record.last_exit
    return {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started,
            "finishedAt": finished,
            "containerID": _container_id(pod, name, record.restarts - 1),
        }
    }


def running(pod: dict[str, Any], record: PodRecord, host_ip: str, stamp: str) -> dict[str, Any]:
    """Every container running (and ready: simulated containers have no probes to fail)."""
    statuses = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        status = _base(c.get("image", ""), c["name"])
        status.update(
            state={"running": {"startedAt": record.start_stamp}},
            lastState=_last_state(pod, c["name"], record),
            ready=True,
            restartCount=record.restarts,
            started=True,
            containerID=_container_id(pod, c["name"], record.restarts),
        )
        statuses.append(status)
    return _status(pod, record, host_ip, stamp, "Running", True, statuses)


def backing_off(pod: dict[str, Any], record: PodRecord, host_ip: str, stamp: str) -> dict[str, Any]:
    """Containers that exited and wait their crash back-off (the kubelet's CrashLoopBackOff)."""
    statuses = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        status = _base(c.get("image", ""), c["name"])
        status.update(
            state={
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off restarting failed container {c['name']} in pod "
                    f"{pod['metadata']['name']}_{pod['metadata'].get('namespace', '')}"
                    f"({pod['metadata'].get('uid', '')})",
                }
            },
            lastState=_last_state(pod, c["name"], record),
            ready=False,
            restartCount=record.restarts,
            started=False,
            containerID=_container_id(pod, c["name"], record.restarts - 1),
        )
        statuses.append(status)
    return _status(pod, record, host_ip, stamp, "Running", False, statuses)


def ended(pod: dict[str, Any], record: PodRecord, host_ip: str, stamp: str, code: int) -> dict[str, Any]:
    """Every container exited with `code` and will not run again: Succeeded on 0, Failed otherwise."""
    statuses = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        status = _base(c.get("image", ""), c["name"])
        status.update(
            state={
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": record.start_stamp,
                    "finishedAt": stamp,
                    "containerID": _container_id(pod, c["name"], record.restarts),
                }
            },
            lastState=_last_state(pod, c["name"], record),
            ready=False,
            restartCount=record.restarts,
            started=False,
            containerID=_container_id(pod, c["name"], record.restarts),
        )
        statuses.append(status)
    phase = "Succeeded" if code == 0 else "Failed"
    return _status(pod, record, host_ip, stamp, phase, False, statuses, reason="PodCompleted")


def _status(
    pod: dict[str, Any],
    record: PodRecord,
    host_ip: str,
    stamp: str,
    phase: str,
    ready: bool,
    containers: list[dict[str, Any]],
    reason: str = "",
) -> dict[str, Any]:
    host_network = bool((pod.get("spec") or {}).get("hostNetwork"))
    ip = host_ip if host_network else record.ip
    not_ready = "" if ready else (reason or "ContainersNotReady")
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            _condition("PodReadyToStartContainers", phase == "Running", stamp),
            _condition("Initialized", True, stamp, reason if reason else ""),
            _condition("Ready", ready, stamp, not_ready),
            _condition("ContainersReady", ready, stamp, not_ready),
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": (pod.get("status") or {}).get("startTime") or stamp,
        "containerStatuses": containers,
    }
    inits = _init_statuses(pod, record.start_stamp or stamp)
    if inits:
        status["initContainerStatuses"] = inits
    return status
