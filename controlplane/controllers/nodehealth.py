"""Is a node still alive? The node lifecycle controller's judgement, as a pure function of what it last
saw, what it sees now and the time (upstream's tryUpdateNodeHealth and ComputeZoneState).

A node proves it is alive by changing its Ready condition's lastHeartbeatTime or its Lease's renewTime
(kube-node-lease/<name>). The controller never compares those times with its own clock (the clocks of
node and controller may differ); it notes *when it saw* a change (the probe timestamp). When no change
was seen for the grace period (nodeMonitorGracePeriod, or nodeStartupGracePeriod for a node that never
posted a Ready condition), every condition the kubelet owns (Ready, MemoryPressure, DiskPressure,
PIDPressure) becomes Unknown: `NodeStatusUnknown` / `Kubelet stopped posting node status.` with a new
lastTransitionTime and the old lastHeartbeatTime kept; a condition never posted is added as
`NodeStatusNeverUpdated` / `Kubelet never posted node status.` with the node's creation time as its
heartbeat.

Zones (region + zone labels) are judged as a whole: with no Ready node a zone is in FullDisruption;
with more than 2 and at least the unhealthy threshold (0.55) not Ready, in PartialDisruption.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from controlplane.controllers.podutil import parse_time
from kubeclient.informer import meta
from kubeclient.objcopy import deep_copy

Obj = dict[str, Any]

READY = "Ready"
# The conditions the kubelet owns; NetworkUnavailable is the network provider's and stays as it is.
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN = "Unknown"
STOPPED_REASON, STOPPED_MESSAGE = "NodeStatusUnknown", "Kubelet stopped posting node status."
NEVER_REASON, NEVER_MESSAGE = "NodeStatusNeverUpdated", "Kubelet never posted node status."

ZONE_LABEL, REGION_LABEL = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
BETA_ZONE_LABEL, BETA_REGION_LABEL = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)
EXCLUDE_DISRUPTION_LABEL = "node.kubernetes.io/exclude-disruption"

INITIAL, NORMAL = "Initial", "Normal"
FULL_DISRUPTION, PARTIAL_DISRUPTION = "FullDisruption", "PartialDisruption"


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(status: Obj | None, type_: str) -> Obj | None:
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == type_:
            return cond
    return None


@dataclass
class NodeHealth:
    """What the controller last saw of a node, and when it last saw it change."""

    probe_timestamp: datetime
    status: Obj
    lease: Obj | None = None


@dataclass(frozen=True)
class Assessment:
    health: NodeHealth  # to remember (also when the write below fails)
    observed_ready: Obj  # the Ready condition before this pass (a stand-in if it was never posted)
    current_ready: Obj | None  # the Ready condition after it (what new_status holds, if written)
    new_status: Obj | None  # the status to write (conditions gone Unknown), None: nothing to write
    grace: float


def _renew_time(lease: Obj | None) -> datetime | None:
    return parse_time(((lease or {}).get("spec") or {}).get("renewTime"))


def _lease_renewed(saved: Obj | None, observed: Obj | None) -> bool:
    if observed is None:
        return False
    if saved is None:
        return True
    before, after = _renew_time(saved), _renew_time(observed)
    return before is not None and after is not None and before < after


def _observe(
    node: Obj, saved: NodeHealth | None, lease: Obj | None, now: datetime, grace: float, startup_grace: float
) -> tuple[NodeHealth, Obj, float]:
    """What to remember of the node this pass, its Ready condition as seen, and its grace period."""
    status = node.get("status") or {}
    created = parse_time(meta(node).get("creationTimestamp")) or now
    current = condition(status, READY)
    health = copy.copy(saved) if saved is not None else None
    if current is None:
        # Never posted: judged from its creation, with the longer startup grace.
        observed: Obj = {
            "type": READY,
            "status": UNKNOWN,
            "lastHeartbeatTime": stamp(created),
            "lastTransitionTime": stamp(created),
        }
        period = startup_grace
        if health is not None:
            health.status = status
        else:
            health = NodeHealth(probe_timestamp=created, status=status)
    else:
        observed = dict(current)
        period = grace
    saved_ready = condition(health.status, READY) if health is not None else None
    saved_lease = health.lease if health is not None else None
    if health is None or (saved_ready is None) != (current is None):
        # First sight of it, or its Ready condition appeared (or vanished): the clock starts now.
        health = NodeHealth(probe_timestamp=now, status=status)
    elif (
        saved_ready is not None
        and current is not None
        and saved_ready.get("lastHeartbeatTime") != current.get("lastHeartbeatTime")
    ):
        # A heartbeat. (Upstream forgets the saved lease here, so the next pass takes the lease as new.)
        health = NodeHealth(probe_timestamp=now, status=status)
    if _lease_renewed(saved_lease, lease):
        health.lease = lease
        health.probe_timestamp = now
    return health, observed, period


def _silenced(status: Obj, created: datetime, now: datetime) -> Obj:
    """The status with every kubelet condition Unknown (added where it was never posted)."""
    new_status = deep_copy(status)
    conditions = new_status.setdefault("conditions", [])
    for type_ in KUBELET_CONDITIONS:
        cond = condition(new_status, type_)
        if cond is None:
            conditions.append(
                {
                    "type": type_,
                    "status": UNKNOWN,
                    "reason": NEVER_REASON,
                    "message": NEVER_MESSAGE,
                    "lastHeartbeatTime": stamp(created),
                    "lastTransitionTime": stamp(now),
                }
            )
        elif cond.get("status") != UNKNOWN:
            cond.update(
                status=UNKNOWN, reason=STOPPED_REASON, message=STOPPED_MESSAGE, lastTransitionTime=stamp(now)
            )
    return new_status


def assess(
    node: Obj,
    saved: NodeHealth | None,
    lease: Obj | None,
    now: datetime,
    *,
    grace: float,
    startup_grace: float,
) -> Assessment:
    """One node's health this pass: what to remember, and the status to write if it went silent."""
    health, observed, period = _observe(node, saved, lease, now, grace, startup_grace)
    status = node.get("status") or {}
    current = condition(status, READY)
    if now <= health.probe_timestamp + timedelta(seconds=period):
        return Assessment(health, observed, current, None, period)
    created = parse_time(meta(node).get("creationTimestamp")) or now
    new_status = _silenced(status, created, now)
    after = condition(new_status, READY)
    if after == observed:
        return Assessment(health, observed, current, None, period)  # Ready unchanged: nothing is written
    return Assessment(health, observed, after, new_status, period)


# --- zones ------------------------------------------------------------------------------------------


def zone_key(node: Obj) -> str:
    """upstream's GetZoneKey: "" without region and zone labels, else region:\\x00:zone."""
    labels = meta(node).get("labels") or {}
    zone = labels.get(ZONE_LABEL) or labels.get(BETA_ZONE_LABEL) or ""
    region = labels.get(REGION_LABEL) or labels.get(BETA_REGION_LABEL) or ""
    if not zone and not region:
        return ""
    return f"{region}:\x00:{zone}"


def excluded_from_disruption(node: Obj) -> bool:
    return EXCLUDE_DISRUPTION_LABEL in (meta(node).get("labels") or {})


def zone_state(ready_conditions: list[Obj | None], unhealthy_threshold: float) -> tuple[int, str]:
    """(not Ready nodes, state) of one zone, from its nodes' Ready conditions."""
    ready = sum(1 for c in ready_conditions if c is not None and c.get("status") == "True")
    not_ready = len(ready_conditions) - ready
    if ready == 0 and not_ready > 0:
        return not_ready, FULL_DISRUPTION
    if not_ready > 2 and not_ready / (not_ready + ready) >= unhealthy_threshold:
        return not_ready, PARTIAL_DISRUPTION
    return not_ready, NORMAL


def reduced_qps(zone_size: int, large_cluster_threshold: int, secondary_qps: float) -> float:
    """The eviction rate of a partially disrupted zone: the secondary rate in a large zone, none in a
    small one (upstream's ReducedQPSFunc)."""
    return secondary_qps if zone_size > large_cluster_threshold else 0.0
