"""The DaemonSet controller's decisions, without I/O (upstream's daemon_controller.go manage /
podsShouldBeOnNode, update.go rollingUpdate, and updateDaemonSetStatus): per node, what pods to create or
delete; for a RollingUpdate, which old pods go (maxUnavailable) or which nodes get a new pod beside the
old one (maxSurge); and the status numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.controllers.daemonset import placement
from controlplane.controllers.daemonset.history import GENERATION_LABEL, HASH_LABEL
from controlplane.controllers.deployment.util import scaled_value
from controlplane.controllers.podutil import is_available, is_ready

Obj = dict[str, Any]
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def target_node(pod: Obj) -> str:
    """The node a daemon pod is for: its nodeName once bound, else its metadata.name affinity."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for req in term.get("matchFields") or []:
            if (
                req.get("key") == "metadata.name"
                and req.get("operator") == "In"
                and len(req.get("values") or []) == 1
            ):
                return str(req["values"][0])
    return ""


def by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        node = target_node(pod)
        if node:
            out.setdefault(node, []).append(pod)
    for group in out.values():
        group.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"].get("name", "")))
    return out


def deleting(pod: Obj) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def template_generation(ds: Obj) -> str:
    return str((ds["metadata"].get("annotations") or {}).get(TEMPLATE_GENERATION, ""))


def is_updated(pod: Obj, ds: Obj, digest: str) -> bool:
    """IsPodUpdated: the pod's template generation or its revision hash is the DaemonSet's current one."""
    labels = pod["metadata"].get("labels") or {}
    generation = template_generation(ds)
    return (bool(generation) and labels.get(GENERATION_LABEL) == generation) or labels.get(
        HASH_LABEL
    ) == digest


@dataclass
class Plan:
    create_on: list[str] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)
    failed: list[tuple[Obj, str]] = field(default_factory=list)  # (pod, node): FailedDaemonPod
    succeeded: list[tuple[Obj, str]] = field(default_factory=list)  # (pod, node): SucceededDaemonPod


class FailedPodBackoff:
    """upstream's failedPodsBackoff (flowcontrol.NewBackOff(1 s, 15 min)) per DaemonSet and node: a failed
    daemon pod is deleted at once, the next one on that node only after 1 s, then 2 s, 4 s, ... up to
    15 minutes, so a node agent refusing the pod is not fought in a hot loop; an entry idle for twice
    the maximum starts over."""

    INITIAL, MAXIMUM = 1.0, 900.0

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, float]] = {}  # key -> (delay, last update)

    def wait(self, key: str, now: float) -> float:
        """Seconds until a failed pod under `key` may be deleted (0: now)."""
        entry = self._entries.get(key)
        if entry is None:
            return 0.0
        delay, since = entry
        return max(0.0, since + delay - now)

    def step(self, key: str, now: float) -> None:
        entry = self._entries.get(key)
        if entry is None or now - entry[1] > 2 * self.MAXIMUM:
            self._entries[key] = (self.INITIAL, now)
        else:
            self._entries[key] = (min(entry[0] * 2, self.MAXIMUM), now)


def allows_surge(ds: Obj) -> bool:
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    return strategy.get("type") == "RollingUpdate" and bool(
        scaled_value((strategy.get("rollingUpdate") or {}).get("maxSurge") or 0, 100, True)
    )


def manage(ds: Obj, nodes: list[Obj], pods_by_node: dict[str, list[Obj]]) -> Plan:
    """podsShouldBeOnNode for every node: create where one should run and none is; delete failed and
    succeeded pods, extra pods (all but the oldest, or with surge the oldest old and the newest new) and pods on nodes
    they may no longer run on."""
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    plan = Plan()
    names = set()
    surge = allows_surge(ds)
    for node in nodes:
        name = node["metadata"]["name"]
        names.add(name)
        run, keep = placement.should_run(node, template_spec)
        pods = pods_by_node.get(name, [])
        if run and not pods:
            plan.create_on.append(name)
            continue
        if not keep:
            plan.delete += [p for p in pods if not deleting(p)]
            continue
        live = []
        for pod in pods:
            if deleting(pod):
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed":
                plan.failed.append((pod, name))
                plan.delete.append(pod)
                continue
            if phase == "Succeeded":  # a daemon is not done while its node is there: replaced next sync
                plan.succeeded.append((pod, name))
                plan.delete.append(pod)
                continue
            live.append(pod)
        if len(live) > 1:
            plan.delete += _excess(live, surge)
    for node, pods in pods_by_node.items():
        if node not in names:  # the node is gone: so are its pods' reasons to be
            plan.delete += [p for p in pods if not deleting(p)]
    return plan


def _excess(live: list[Obj], surge: bool) -> list[Obj]:
    if not surge:
        return live[1:]
    ready_old = next((p for p in live if is_ready(p)), live[0])
    newest = live[-1]
    return [p for p in live if p is not ready_old and p is not newest]


def bounds(ds: Obj, desired: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) against the desired number, rounded up; at least one unavailable when
    both come to zero (updatedDesiredNodeCounts)."""
    rolling = (((ds.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate")) or {}
    surge = scaled_value(rolling.get("maxSurge") or 0, desired, True)
    unavailable = scaled_value(
        rolling.get("maxUnavailable") if rolling.get("maxUnavailable") is not None else 1, desired, True
    )
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def _new_and_old(pods: list[Obj], ds: Obj, digest: str) -> tuple[Obj | None, Obj | None, bool]:
    """findUpdatedPodsOnNode: at most one new and one old live pod, else not ok."""
    new = old = None
    for pod in pods:
        if deleting(pod):
            continue
        if is_updated(pod, ds, digest):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_update(
    ds: Obj, pods_by_node: dict[str, list[Obj]], desired: int, digest: str, now: datetime
) -> Plan:
    """One step of a RollingUpdate (upstream's rollingUpdate)."""
    min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
    max_surge, max_unavailable = bounds(ds, desired)
    plan = Plan()

    def available(pod: Obj) -> bool:
        return is_available(pod, min_ready, now)

    if max_surge == 0:
        unavailable = 0
        replace: list[Obj] = []
        candidates: list[Obj] = []
        for node in sorted(pods_by_node):
            new, old, ok = _new_and_old(pods_by_node[node], ds, digest)
            if not ok or (new is None) == (old is None):
                unavailable += 1
            elif new is not None:
                unavailable += 0 if available(new) else 1
            elif old is not None and not available(old):
                replace.append(old)
            elif unavailable < max_unavailable:
                candidates.append(old)  # type: ignore[arg-type]
        room = min(max(0, max_unavailable - unavailable), len(candidates))
        plan.delete = replace + candidates[:room]
        return plan
    surging = 0
    allowed: list[str] = []
    candidates_nodes: list[str] = []
    for node in sorted(pods_by_node):
        new, old, ok = _new_and_old(pods_by_node[node], ds, digest)
        if not ok:
            surging += 1
        elif old is None:
            continue
        elif new is None:
            if not available(old):
                allowed.append(node)
            elif surging < max_surge:
                candidates_nodes.append(node)
        elif not available(new):
            surging += 1
        else:
            plan.delete.append(old)
    room = min(max(0, max_surge - surging), len(candidates_nodes))
    plan.create_on = allowed + candidates_nodes[:room]
    return plan


def status(ds: Obj, nodes: list[Obj], pods_by_node: dict[str, list[Obj]], digest: str, now: datetime) -> Obj:
    """updateDaemonSetStatus's numbers."""
    template_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    min_ready = int((ds.get("spec") or {}).get("minReadySeconds") or 0)
    desired = current = ready = available = updated = misscheduled = 0
    for node in nodes:
        run, _ = placement.should_run(node, template_spec)
        pods = pods_by_node.get(node["metadata"]["name"], [])
        if not run:
            misscheduled += 1 if pods else 0
            continue
        desired += 1
        if not pods:
            continue
        current += 1
        pod = pods[0]
        if is_ready(pod):
            ready += 1
            available += 1 if is_available(pod, min_ready, now) else 0
        updated += 1 if is_updated(pod, ds, digest) else 0
    out: Obj = {
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberReady": ready,
        "numberMisscheduled": misscheduled,
        "updatedNumberScheduled": updated,
        "numberAvailable": available,
        "numberUnavailable": desired - available,
        "observedGeneration": ds["metadata"].get("generation", 0),
    }
    collisions = (ds.get("status") or {}).get("collisionCount")
    if collisions is not None:
        out["collisionCount"] = collisions
    return {
        k: v
        for k, v in out.items()
        if v or k in ("desiredNumberScheduled", "currentNumberScheduled", "numberReady", "numberMisscheduled")
    }
