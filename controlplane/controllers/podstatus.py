"""Changing a pod's status from a controller, as upstream's helpers do it: UpdatePodCondition (a
condition's lastTransitionTime moves only when its status changes) and PatchPodStatus (a strategic
merge patch of pods/status that names the pod's UID, so a pod recreated under the same name is never
touched).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from kubeclient.client import STRATEGIC_PATCH, KubeClient

Obj = dict[str, Any]
DISRUPTION_TARGET = "DisruptionTarget"
_COMPARED = ("status", "reason", "message", "lastProbeTime", "lastTransitionTime")


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def update_pod_condition(status: Obj, condition: Obj, now: str) -> bool:
    """Set `condition` in `status` (in place); True if anything about it changed."""
    new = {k: v for k, v in condition.items() if v is not None}
    new["lastTransitionTime"] = now
    conditions = status.setdefault("conditions", [])
    for index, old in enumerate(conditions):
        if old.get("type") != new.get("type"):
            continue
        if new.get("status") == old.get("status"):
            if old.get("lastTransitionTime"):
                new["lastTransitionTime"] = old["lastTransitionTime"]
            else:
                new.pop("lastTransitionTime")
        conditions[index] = new
        return any((new.get(k) or None) != (old.get(k) or None) for k in _COMPARED)
    conditions.append(new)
    return True


def disruption_target(reason: str, message: str) -> Obj:
    return {"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message}


async def patch_pod_status(client: KubeClient, pod: Obj, status: Obj) -> Obj:
    """Patch the fields of `status` (phase, conditions by type) into the pod's status."""
    meta = pod["metadata"]
    body = {"metadata": {"uid": meta["uid"]}, "status": status}
    return await client.patch(
        pod_path(meta["namespace"], meta["name"]) + "/status", body, content_type=STRATEGIC_PATCH
    )
