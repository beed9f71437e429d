"""The pod status the kubelet writes, and the patch that writes it, as upstream's status manager makes
them (pkg/kubelet/status/status_manager.go: normalizeStatus, mergePodStatus; statusutil.PatchPodStatus).

- normalize: termination messages cut to the pod's share of 12 KiB, container statuses sorted by name.
- merge: conditions other writers own stay as the API holds them, and a terminal phase is held back
  while the pod could still have running containers (its sidecars or sandbox not yet stopped), so no
  client sees Succeeded/Failed while something of the pod still runs.
- patch: a strategic merge patch against the status the API holds: conditions by type (so a condition
  another writer added meanwhile survives), fields the kubelet dropped set to null, lists replaced.
"""

from __future__ import annotations

from typing import Any

from agent.pods.conditions import KUBELET_CONDITION_TYPES, TERMINAL

MAX_POD_TERMINATION_MESSAGE = 12 * 1024  # upstream's MaxPodTerminationMessageLogLength
# The status fields the kubelet writes; anything else in the API's status (nominatedNodeName,
# resourceClaimStatuses, ...) belongs to someone else and is never touched.
KUBELET_FIELDS = (
    "phase",
    "conditions",
    "message",
    "reason",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "qosClass",
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
)


def normalize(pod: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """The status as upstream writes it. A new dict: what it changes (a cut message, the order of the
    container statuses) is copied, the rest is shared with `status`, which stays as it was."""
    out = dict(status)
    spec = pod.get("spec") or {}
    count = (
        len(spec.get("containers") or [])
        + len(spec.get("initContainers") or [])
        + len(spec.get("ephemeralContainers") or [])
    )
    per_status = MAX_POD_TERMINATION_MESSAGE // count if count else MAX_POD_TERMINATION_MESSAGE
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        if out.get(key):
            out[key] = [_cut_messages(cs, per_status) for cs in out[key]]
    if out.get("containerStatuses"):
        out["containerStatuses"] = sorted(out["containerStatuses"], key=lambda cs: cs.get("name", ""))
    return out


def _cut_messages(cs: dict[str, Any], limit: int) -> dict[str, Any]:
    """A container status whose terminated messages fit in `limit` bytes (copied where one is cut)."""
    for part in ("state", "lastState"):
        term = (cs.get(part) or {}).get("terminated")
        if term and term.get("message"):
            data = term["message"].encode()
            if len(data) > limit:
                cut = {**term, "message": data[:limit].decode(errors="replace")}
                cs = {**cs, part: {**cs[part], "terminated": cut}}
    return cs


def merge(api: dict[str, Any], ours: dict[str, Any], could_have_running: bool) -> dict[str, Any]:
    """upstream's mergePodStatus: the status to write over what the API holds (a new dict sharing the
    values it keeps with `ours`)."""
    out = dict(ours)
    others = [c for c in api.get("conditions") or [] if c.get("type") not in KUBELET_CONDITION_TYPES]
    mine = [c for c in ours.get("conditions") or [] if c.get("type") in KUBELET_CONDITION_TYPES]
    out["conditions"] = [*others, *mine]
    if api.get("phase") not in TERMINAL and out.get("phase") in TERMINAL and could_have_running:
        for key in ("phase", "reason", "message"):
            if api.get(key):
                out[key] = api[key]
            else:
                out.pop(key, None)
    return out


def _clean(value: Any) -> Any:
    """A value as the API stores it: fields that are null (lastProbeTime, an unknown startedAt) dropped."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def same(api: dict[str, Any], ours: dict[str, Any]) -> bool:
    """Whether the API already holds our status: our fields equal, conditions compared by type."""
    for key in KUBELET_FIELDS:
        if key == "conditions":
            held = {c.get("type"): _clean(c) for c in api.get("conditions") or []}
            if any(held.get(c.get("type")) != _clean(c) for c in ours.get("conditions") or []):
                return False
            continue
        if _clean(api.get(key)) != _clean(ours.get(key)):
            return False
    return True


def _condition_patch(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    item = dict(new)
    for key in old or {}:
        if key not in new:
            item[key] = None  # a reason or message that no longer applies
    return item


def status_patch(api: dict[str, Any], ours: dict[str, Any]) -> dict[str, Any]:
    """The strategic merge patch turning the API's status into ours (the kubelet's fields only)."""
    patch: dict[str, Any] = {}
    for key in KUBELET_FIELDS:
        if key == "conditions":
            held = {c.get("type"): c for c in api.get("conditions") or []}
            changed = [
                _condition_patch(held.get(c.get("type")), c)
                for c in ours.get("conditions") or []
                if _clean(held.get(c.get("type"))) != _clean(c)
            ]
            if changed:
                patch["conditions"] = changed
            continue
        if key not in ours:
            if key in api:
                patch[key] = None
            continue
        if _clean(api.get(key)) == _clean(ours[key]):
            continue
        if key in ("podIPs", "hostIPs"):
            # Lists merged by ip on the server: name the whole new list, replacing the old one.
            patch[key] = [{"$patch": "replace"}, *ours[key]]
        else:
            patch[key] = ours[key]
    return patch
