"""Where a WaitForFirstConsumer claim may be provisioned (upstream's checkVolumeProvisions and
hasEnoughCapacity in pkg/scheduler/framework/plugins/volumebinding/binder.go): the class's
allowedTopologies must admit the node, and when the class's provisioner is a CSIDriver with
`storageCapacity: true`, some CSIStorageCapacity of that class whose nodeTopology selects the node must
offer at least the claim's request (its maximumVolumeSize, else its capacity). A driver without the
opt-in, a provisioner that is not a CSIDriver, or a claim without a storage request is not checked.

Pure functions over the objects the scheduler's informers hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubeclient import volumes as vol
from kubeclient.selectors import SelectorError, from_label_selector

Obj = dict[str, Any]


def topology_allows(sc: Obj, labels: Mapping[str, str]) -> bool:
    """MatchTopologySelectorTerms: no terms admit every node; else some term whose every expression
    names a label of the node with one of its values."""
    terms = sc.get("allowedTopologies") or []
    if not terms:
        return True
    return any(
        all(
            expr.get("key") in labels and labels[expr.get("key")] in (expr.get("values") or [])
            for expr in term.get("matchLabelExpressions") or []
        )
        for term in terms
    )


def volume_limit(capacity: Obj) -> int | None:
    """The largest volume a CSIStorageCapacity admits: maximumVolumeSize when set (more precise), else
    capacity; None when neither is."""
    for key in ("maximumVolumeSize", "capacity"):
        if capacity.get(key) is not None:
            return vol.storage_bytes(capacity[key])
    return None


def node_has_access(capacity: Obj, labels: Mapping[str, str]) -> bool:
    """A capacity without nodeTopology is available nowhere; otherwise its label selector decides."""
    topology = capacity.get("nodeTopology")
    if topology is None:
        return False
    try:
        return from_label_selector(topology).matches(labels)
    except SelectorError:
        return False


def capacity_checked(provisioner: str, drivers: Any) -> bool:
    """The provisioner is a CSIDriver that opted into capacity tracking."""
    driver = drivers.get(provisioner) if drivers is not None else None
    return bool(driver and (driver.get("spec") or {}).get("storageCapacity") is True)


def has_enough_capacity(
    claim: Obj, sc: Obj, labels: Mapping[str, str], drivers: Any, capacities: Iterable[Obj]
) -> bool:
    """hasEnoughCapacity: a new volume of the claim's size fits in a capacity the node can reach."""
    request = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")
    if request is None or not capacity_checked(sc.get("provisioner") or "", drivers):
        return True
    size = vol.storage_bytes(request)
    name = (sc.get("metadata") or {}).get("name")
    for capacity in capacities:
        limit = volume_limit(capacity)
        if (
            capacity.get("storageClassName") == name
            and limit is not None
            and limit >= size
            and node_has_access(capacity, labels)
        ):
            return True
    return False


def limit_grew(old: Obj | None, new: Obj) -> bool:
    """Upstream's queueing hint for a CSIStorageCapacity: a new object, or a larger volume limit."""
    if old is None:
        return True
    after, before = volume_limit(new), volume_limit(old)
    return after is not None and (before is None or after > before)


def capacity_disabled(old: Obj, new: Obj) -> bool:
    """Upstream's queueing hint for a CSIDriver update: storageCapacity turned from true to off."""
    was = (old.get("spec") or {}).get("storageCapacity") is True
    return was and (new.get("spec") or {}).get("storageCapacity") is not True
