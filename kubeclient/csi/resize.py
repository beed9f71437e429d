"""What the CSI resizer (controlplane) and the kubelet's node expansion (agent) both write on a claim
during a volume expansion, as 1.32's RecoverVolumeExpansionFailure has them: the resize conditions, the
allocatedResourceStatuses values, and the size as a quantity."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from kubeclient.eventcorrelator import rfc3339
from kubeclient.quantity import BINARY_SI, Quantity

Obj = dict[str, Any]
RESIZING, FS_PENDING = "Resizing", "FileSystemResizePending"
# The claim conditions the resizer and the kubelet own (upstream's MergeResizeConditionsOfPVC).
RESIZE_CONDITIONS = (RESIZING, FS_PENDING, "ControllerResizeError", "NodeResizeError")
CONTROLLER_IN_PROGRESS = "ControllerResizeInProgress"
CONTROLLER_INFEASIBLE = "ControllerResizeInfeasible"
NODE_PENDING, NODE_IN_PROGRESS = "NodeResizePending", "NodeResizeInProgress"
NODE_INFEASIBLE = "NodeResizeInfeasible"
FS_PENDING_MESSAGE = "Waiting for user to (re-)start a pod to finish file system resize of volume on node."


def binary(n_bytes: int) -> str:
    """A byte count as the resizer writes it (resource.NewQuantity(n, BinarySI)): 128Mi, 1Gi."""
    return str(Quantity(Decimal(n_bytes), BINARY_SI))


def merge_conditions(current: list[Obj], wanted: list[Obj]) -> list[Obj]:
    """The claim's other conditions kept; the resize ones replaced by `wanted` (a condition already there
    with the same type and status keeps its transition time)."""
    kept = [c for c in current if c.get("type") not in RESIZE_CONDITIONS]
    for wanted_condition in wanted:
        old = next((c for c in current if c.get("type") == wanted_condition["type"]), None)
        same = old is not None and old.get("status") == wanted_condition["status"]
        kept.append(old if same else wanted_condition)
    return kept


def condition(kind: str, message: str = "") -> Obj:
    out: Obj = {
        "type": kind,
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": rfc3339(time.time()),
    }
    if message:
        out["message"] = message
    return out


def resize_status(claim: Obj) -> str:
    """The claim's allocatedResourceStatuses for storage ("" when none)."""
    return ((claim.get("status") or {}).get("allocatedResourceStatuses") or {}).get("storage", "")
