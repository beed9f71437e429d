"""The pod conditions the kubelet owns, one function each, as upstream's pkg/kubelet/status/generate.go.

`KUBELET_CONDITIONS` is the one table: which conditions the kubelet writes, in the order it writes
them, and the function that decides each. Everything else in the pod's conditions (readiness gates,
DisruptionTarget, ...) belongs to another writer and is kept as the API holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.pods.runtime import PodRuntime, sandbox_changed
from agent.pods.spec import app_containers, init_containers, is_sidecar

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Condition:
    type: str
    ok: bool
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class ConditionInputs:
    """What the conditions are judged on: the spec, the runtime, the container statuses just made (init
    and app), the phase, and the conditions other writers hold (for readiness gates)."""

    pod: dict[str, Any]
    runtime: PodRuntime
    statuses: list[dict[str, Any]]
    phase: str
    others: list[dict[str, Any]]

    def status_of(self, name: str) -> dict[str, Any] | None:
        return next((s for s in self.statuses if s["name"] == name), None)


def _names(names: list[str]) -> str:
    """A Go []string as %s prints it: [a b]."""
    return "[" + " ".join(names) + "]"


def ready_to_start_containers(inp: ConditionInputs) -> Condition:
    """True when no new sandbox is needed: one ready sandbox with its network set up."""
    return Condition("PodReadyToStartContainers", not sandbox_changed(inp.pod, inp.runtime).changed)


def initialized(inp: ConditionInputs) -> Condition:
    """Regular init containers have exited 0 and sidecars have started (passed their startup probe);
    once a regular container has started, the pod stays initialized while sidecars restart."""
    inits = init_containers(inp.pod)
    if not inits:
        return Condition("Initialized", True)
    unknown, incomplete = [], []
    for c in inits:
        st = inp.status_of(c["name"])
        if st is None:
            unknown.append(c["name"])
        elif is_sidecar(c):
            if not st.get("started"):
                incomplete.append(c["name"])
        elif not st.get("ready"):
            incomplete.append(c["name"])
    if inp.phase == "Succeeded" and not unknown:
        return Condition("Initialized", True, "PodCompleted")
    if any_regular_container_started(inp.pod, inp.statuses):
        return Condition("Initialized", True)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {_names(incomplete)}")
    if messages:
        return Condition("Initialized", False, "ContainersNotInitialized", ", ".join(messages))
    return Condition("Initialized", True)


def containers_ready(inp: ConditionInputs) -> Condition:
    """Every app container and sidecar is ready; in a terminal phase always False (PodCompleted,
    PodFailed)."""
    unknown, unready = [], []
    for c in [*(c for c in init_containers(inp.pod) if is_sidecar(c)), *app_containers(inp.pod)]:
        st = inp.status_of(c["name"])
        if st is None:
            unknown.append(c["name"])
        elif not st.get("ready"):
            unready.append(c["name"])
    if inp.phase == "Succeeded" and not unknown:
        return Condition("ContainersReady", False, "PodCompleted")
    if inp.phase == "Failed":
        return Condition("ContainersReady", False, "PodFailed")
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {_names(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {_names(unready)}")
    if messages:
        return Condition("ContainersReady", False, "ContainersNotReady", ", ".join(messages))
    return Condition("ContainersReady", True)


def ready(inp: ConditionInputs) -> Condition:
    """ContainersReady, and every readiness gate's condition True."""
    containers = containers_ready(inp)
    if not containers.ok:
        return Condition("Ready", False, containers.reason, containers.message)
    held = {c.get("type"): c for c in inp.others}
    messages = []
    for gate in (inp.pod.get("spec") or {}).get("readinessGates") or []:
        kind = gate.get("conditionType", "")
        cond = held.get(kind)
        if cond is None:
            messages.append(f'corresponding condition of pod readiness gate "{kind}" does not exist.')
        elif cond.get("status") != "True":
            messages.append(
                f'the status of pod readiness gate "{kind}" is not "True", but {cond.get("status")}'
            )
    if messages:
        return Condition("Ready", False, "ReadinessGatesNotReady", ", ".join(messages))
    return Condition("Ready", True)


def scheduled(inp: ConditionInputs) -> Condition:
    return Condition("PodScheduled", True)


# The kubelet's conditions, in the order upstream's generateAPIPodStatus appends them.
KUBELET_CONDITIONS: tuple[tuple[str, Callable[[ConditionInputs], Condition]], ...] = (
    ("PodReadyToStartContainers", ready_to_start_containers),
    ("Initialized", initialized),
    ("Ready", ready),
    ("ContainersReady", containers_ready),
    ("PodScheduled", scheduled),
)
KUBELET_CONDITION_TYPES = frozenset(kind for kind, _ in KUBELET_CONDITIONS)


def any_regular_container_started(pod: dict[str, Any], statuses: list[dict[str, Any]]) -> bool:
    """upstream's HasAnyRegularContainerStarted: an app container's status is running or terminated."""
    names = {c["name"] for c in app_containers(pod)}
    return any(
        s["name"] in names and ("running" in s["state"] or "terminated" in s["state"]) for s in statuses
    )


def generate_conditions(
    inp: ConditionInputs, previous: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """Other writers' conditions as the API holds them (DisruptionTarget as the kubelet last wrote it),
    then the kubelet's in the table's order; a condition's lastTransitionTime moves only when its
    status changes (upstream's updateLastTransitionTime against the last status)."""
    old = {c.get("type"): c for c in previous}
    out = [
        c
        for c in inp.others
        if c.get("type") not in KUBELET_CONDITION_TYPES and c.get("type") != "DisruptionTarget"
    ]
    disruption = old.get("DisruptionTarget") or next(
        (c for c in inp.others if c.get("type") == "DisruptionTarget"), None
    )
    if disruption is not None:
        out.append(disruption)
    for _kind, decide in KUBELET_CONDITIONS:
        cond = decide(inp)
        item: dict[str, Any] = {
            "type": cond.type,
            "status": "True" if cond.ok else "False",
            "lastProbeTime": None,
        }
        if cond.reason:
            item["reason"] = cond.reason
        if cond.message:
            item["message"] = cond.message
        prev = old.get(cond.type)
        same = prev is not None and prev.get("status") == item["status"] and prev.get("lastTransitionTime")
        item["lastTransitionTime"] = prev["lastTransitionTime"] if same else now
        out.append(item)
    return out
