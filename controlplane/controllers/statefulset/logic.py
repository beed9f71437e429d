"""What a StatefulSet sync does next (upstream's stateful_set_control.go updateStatefulSet), without I/O.

`plan` splits the pods into the replicas of the ordinal range [start, start + replicas) and the condemned
ones outside it, then walks upstream's phases and returns the steps they take:

1. each replica in ordinal order: a failed or succeeded pod is deleted (it comes back next sync); a
   missing one is created (its claims first) unless a claim of that name still belongs to an earlier pod;
   a pending pod gets its missing claims; a pod whose identity labels or claim owners drifted is fixed.
   OrderedReady (monotonic) stops at the first create or delete, and at the first pod that is
   terminating, not Running and Ready, or not yet available: nothing goes past an unhealthy pod.
2. the claim owners of condemned pods (whenScaled: Delete gives them to the pod before it goes).
3. condemned pods, highest ordinal first: OrderedReady deletes one per sync and only once every other
   pod is healthy (the first unhealthy pod itself may go); Parallel deletes them all.
4. RollingUpdate: from the highest ordinal down to the partition, the first pod not at the update
   revision is deleted (it is recreated at the update revision), waiting on any unhealthy one; OnDelete
   stops before this. maxUnavailable is behind a gate that is off in 1.32, so one pod at a time.

The status counts the pods as upstream's computeReplicaStatus; `complete_rolling_update` moves the
current revision once every replica runs the update revision and is ready.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.controllers import podutil
from controlplane.controllers.statefulset import identity

Obj = dict[str, Any]

PARALLEL = "Parallel"
ON_DELETE, ROLLING_UPDATE = "OnDelete", "RollingUpdate"


@dataclass
class Step:
    """One write: `create` a pod (claims first), `delete` a pod, `identity` (relabel a pod), `claims`
    (create a pending pod's missing claims), `owners` (put a pod's claims' ownerReferences right)."""

    verb: str
    pod: Obj
    why: str = ""


@dataclass
class Plan:
    steps: list[list[Step]] = field(default_factory=list)  # phases; the steps of a phase may run at once
    status: Obj = field(default_factory=dict)
    waiting_on: str = ""  # the pod an OrderedReady sync stopped at, for logs


# --- pod facts ---------------------------------------------------------------------------------------


def phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def is_created(pod: Obj) -> bool:
    return phase(pod) != ""


def is_terminating(pod: Obj) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def running_and_ready(pod: Obj) -> bool:
    return phase(pod) == "Running" and podutil.is_ready(pod)


def running_and_available(pod: Obj, min_ready: int, now: datetime) -> bool:
    return phase(pod) == "Running" and podutil.is_available(pod, min_ready, now)


def is_healthy(pod: Obj) -> bool:
    return running_and_ready(pod) and not is_terminating(pod)


# --- revisions ---------------------------------------------------------------------------------------


def apply_revision(sts: Obj, revision: Obj) -> Obj:
    """ApplyRevision: the set with the revision's template (its data is `{"spec":{"template":{...,
    "$patch":"replace"}}}`)."""
    out = copy.deepcopy(sts)
    template = copy.deepcopy(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    out.setdefault("spec", {})["template"] = template
    return out


def versioned_pod(current_set: Obj, update_set: Obj, current: str, update: str, ordinal: int) -> Obj:
    """newVersionedStatefulSetPod: below the partition (or the current replicas when RollingUpdate has
    no parameters) a new pod is made at the current revision, else at the update revision."""
    spec = current_set.get("spec") or {}
    strategy = spec.get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate")
    start = identity.start_ordinal(current_set)
    if rolling is None:
        current_count = int((current_set.get("status") or {}).get("currentReplicas") or 0)
        below = strategy.get("type") == ROLLING_UPDATE and ordinal < start + current_count
    else:
        below = ordinal < start + int(rolling.get("partition") or 0)
    if below:
        return identity.new_pod(current_set, ordinal, current)
    return identity.new_pod(update_set, ordinal, update)


# --- status --------------------------------------------------------------------------------------------


def replica_status(pods: list[Obj], min_ready: int, current: str, update: str, now: datetime) -> Obj:
    counts = {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "currentReplicas": 0}
    counts["updatedReplicas"] = 0
    for pod in pods:
        created = is_created(pod)
        counts["replicas"] += created
        if running_and_ready(pod):
            counts["readyReplicas"] += 1
            counts["availableReplicas"] += running_and_available(pod, min_ready, now)
        if created and not is_terminating(pod):
            counts["currentReplicas"] += identity.revision_of(pod) == current
            counts["updatedReplicas"] += identity.revision_of(pod) == update
    return counts


def complete_rolling_update(sts: Obj, status: Obj) -> None:
    strategy = ((sts.get("spec") or {}).get("updateStrategy") or {}).get("type")
    if (
        strategy == ROLLING_UPDATE
        and status.get("updatedReplicas", 0) == status.get("replicas", 0)
        and status.get("readyReplicas", 0) == status.get("replicas", 0)
    ):
        status["currentReplicas"] = status.get("updatedReplicas", 0)
        status["currentRevision"] = status.get("updateRevision", "")


def wire_status(status: Obj) -> Obj:
    """The status as the API carries it: replicas, availableReplicas and collisionCount (a pointer the
    controller always sets) always, the rest omitempty."""
    always = ("replicas", "availableReplicas", "collisionCount")
    return {k: v for k, v in status.items() if k in always or v not in (0, "", None)}


# --- the plan ------------------------------------------------------------------------------------------


@dataclass
class Inputs:
    sts: Obj
    current_set: Obj
    update_set: Obj
    current: str  # revision names
    update: str
    pods: list[Obj]
    claims: dict[str, Obj]  # claim name -> claim (the namespace's)
    now: datetime
    collision_count: int = 0


def _claims_missing(inp: Inputs, pod: Obj) -> bool:
    return any(
        c["metadata"]["name"] not in inp.claims
        for c in identity.claims_for(inp.sts, identity.ordinal_of(pod)).values()
    )


def owners_right(sts: Obj, pod: Obj, claims: dict[str, Obj]) -> bool:
    """ClaimsMatchRetentionPolicy over the claims that exist (a missing one is picked up later)."""
    for wanted in identity.claims_for(sts, identity.ordinal_of(pod)).values():
        claim = claims.get(wanted["metadata"]["name"])
        if claim is not None and not identity.claim_owner_up_to_date(claim, sts, pod):
            return False
    return True


def _stale(inp: Inputs, pod: Obj) -> bool:
    name = pod["metadata"]["name"]
    return any(
        identity.claim_is_stale(inp.claims.get(c["metadata"]["name"]), inp.sts, name)
        for c in identity.claims_for(inp.sts, identity.ordinal_of(pod)).values()
    )


def _replica_steps(inp: Inputs, pod: Obj, exists: bool, monotonic: bool) -> tuple[bool, list[Step]]:
    """processReplica: (stop here, steps)."""
    min_ready = int((inp.sts.get("spec") or {}).get("minReadySeconds") or 0)
    if exists and phase(pod) in ("Failed", "Succeeded"):
        return True, [] if is_terminating(pod) else [Step("delete", pod, f"pod {phase(pod).lower()}")]
    if not exists:
        if _stale(inp, pod):
            return True, []
        return monotonic, [Step("create", pod)]
    steps: list[Step] = []
    if phase(pod) == "Pending" and _claims_missing(inp, pod):
        steps.append(Step("claims", pod))
    if monotonic and (
        is_terminating(pod)
        or not running_and_ready(pod)
        or not running_and_available(pod, min_ready, inp.now)
    ):
        return True, steps
    if not identity.identity_matches(inp.sts, pod):
        steps.append(Step("identity", pod))
    if not owners_right(inp.update_set, pod, inp.claims):
        steps.append(Step("owners", pod))
    return False, steps


def split(sts: Obj, pods: list[Obj]) -> tuple[list[Obj | None], list[Obj]]:
    """(replicas by index into the ordinal range, condemned highest ordinal first)."""
    start = identity.start_ordinal(sts)
    slots: list[Obj | None] = [None] * identity.replicas(sts)
    condemned: list[Obj] = []
    for pod in pods:
        ordinal = identity.ordinal_of(pod)
        if identity.in_range(sts, ordinal):
            slots[ordinal - start] = pod
        elif ordinal >= 0:
            condemned.append(pod)
    condemned.sort(key=identity.ordinal_of, reverse=True)
    return slots, condemned


def plan(inp: Inputs) -> Plan:
    spec = inp.sts.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    status = {
        "observedGeneration": (inp.sts.get("metadata") or {}).get("generation", 0),
        "currentRevision": inp.current,
        "updateRevision": inp.update,
        "collisionCount": inp.collision_count,
        **replica_status(inp.pods, min_ready, inp.current, inp.update, inp.now),
    }
    out = Plan(status=status)
    if (inp.sts.get("metadata") or {}).get("deletionTimestamp"):
        return out
    slots, condemned = split(inp.sts, inp.pods)
    start = identity.start_ordinal(inp.sts)
    replicas = [
        pod
        if pod is not None
        else versioned_pod(inp.current_set, inp.update_set, inp.current, inp.update, start + i)
        for i, pod in enumerate(slots)
    ]
    first_unhealthy = next((p for p in [*replicas, *reversed(condemned)] if not is_healthy(p)), None)
    monotonic = spec.get("podManagementPolicy") != PARALLEL

    phase_steps: list[Step] = []
    for index, pod in enumerate(replicas):
        stop, steps = _replica_steps(inp, pod, slots[index] is not None, monotonic)
        phase_steps += steps
        if stop and monotonic:
            out.steps.append(phase_steps)
            out.waiting_on = pod["metadata"]["name"]
            return out
    out.steps.append(phase_steps)

    out.steps.append(
        [Step("owners", p) for p in condemned if not owners_right(inp.update_set, p, inp.claims)]
    )

    deletions: list[Step] = []
    for pod in condemned:
        if is_terminating(pod):
            if monotonic:
                out.steps.append(deletions)
                out.waiting_on = pod["metadata"]["name"]
                return out
            continue
        if monotonic and pod is not first_unhealthy and not running_and_available(pod, min_ready, inp.now):
            out.steps.append(deletions)
            out.waiting_on = pod["metadata"]["name"]
            return out
        deletions.append(Step("delete", pod, "scale down"))
        if monotonic:
            out.steps.append(deletions)
            return out
    out.steps.append(deletions)

    if (spec.get("updateStrategy") or {}).get("type") == ON_DELETE:
        return out
    partition = int(((spec.get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition") or 0)
    for target in range(len(replicas) - 1, partition - 1, -1):
        pod = replicas[target]
        if identity.revision_of(pod) != inp.update and not is_terminating(pod):
            out.steps.append([Step("delete", pod, "update")])
            status["currentReplicas"] = status["currentReplicas"] - 1
            return out
        if not is_healthy(pod):
            out.waiting_on = pod["metadata"]["name"]
            return out
    return out
