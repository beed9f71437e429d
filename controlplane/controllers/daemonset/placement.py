"""Which nodes a DaemonSet's pod belongs on, without I/O (upstream's NodeShouldRunDaemonPod and
util.AddOrUpdateDaemonPodTolerations / ReplaceDaemonSetPodNodeNameNodeAffinity).

A daemon pod tolerates what a node agent must survive: not-ready and unreachable (NoExecute, forever),
disk, memory and PID pressure and unschedulable (NoSchedule), and network-unavailable when it uses the
host's network. A node fits when the template's nodeName (if any), nodeSelector and required node
affinity match it and its NoSchedule/NoExecute taints are tolerated; a pod already there may stay while
only NoSchedule taints are untolerated. The pod goes through the default scheduler, pinned to its node by
a required node affinity on `metadata.name`, as upstream places daemon pods.
"""

from __future__ import annotations

import copy
from typing import Any

from controlplane.controllers.taints import tolerates
from kubeclient.nodeaffinity import term_matches

Obj = dict[str, Any]

NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"


def daemon_tolerations(host_network: bool) -> list[Obj]:
    keys = [
        ("node.kubernetes.io/not-ready", NO_EXECUTE),
        ("node.kubernetes.io/unreachable", NO_EXECUTE),
        ("node.kubernetes.io/disk-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/memory-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/pid-pressure", NO_SCHEDULE),
        ("node.kubernetes.io/unschedulable", NO_SCHEDULE),
    ]
    if host_network:
        keys.append(("node.kubernetes.io/network-unavailable", NO_SCHEDULE))
    return [{"key": key, "operator": "Exists", "effect": effect} for key, effect in keys]


def with_daemon_tolerations(pod_spec: Obj) -> list[Obj]:
    """The template's tolerations plus the daemon ones it lacks (AddOrUpdateTolerationInPodSpec)."""
    tolerations = [dict(t) for t in pod_spec.get("tolerations") or []]
    for extra in daemon_tolerations(bool(pod_spec.get("hostNetwork"))):
        if not any(
            (t.get("key"), t.get("effect"), t.get("operator", "Equal"))
            == (extra["key"], extra["effect"], "Exists")
            and t.get("tolerationSeconds") is None
            for t in tolerations
        ):
            tolerations = [
                t for t in tolerations if (t.get("key"), t.get("effect")) != (extra["key"], extra["effect"])
            ]
            tolerations.append(extra)
    return tolerations


def pinned_affinity(affinity: Obj | None, node: str) -> Obj:
    """ReplaceDaemonSetPodNodeNameNodeAffinity: the required terms become one term selecting the node by
    metadata.name; preferred terms and pod (anti-)affinity stay."""
    out = copy.deepcopy(affinity or {})
    node_affinity = out.setdefault("nodeAffinity", {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    return out


# --- matching ------------------------------------------------------------------------------------------


def fits_affinity(pod_spec: Obj, node: Obj) -> bool:
    meta = node.get("metadata") or {}
    labels, name = meta.get("labels") or {}, meta.get("name", "")
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    return any(term_matches(t, labels, name) for t in required.get("nodeSelectorTerms") or [])


def untolerated(taints: list[Obj], tolerations: list[Obj], effects: tuple[str, ...]) -> bool:
    return any(
        t.get("effect") in effects and not any(tolerates(tol, t) for tol in tolerations) for t in taints
    )


def should_run(node: Obj, template_spec: Obj) -> tuple[bool, bool]:
    """(should run a new daemon pod here, may an existing one keep running)."""
    wanted_node = template_spec.get("nodeName")
    if wanted_node and wanted_node != (node.get("metadata") or {}).get("name"):
        return False, False
    if not fits_affinity(template_spec, node):
        return False, False
    tolerations = with_daemon_tolerations(template_spec)
    taints = (node.get("spec") or {}).get("taints") or []
    if untolerated(taints, tolerations, (NO_SCHEDULE, NO_EXECUTE)):
        return False, not untolerated(taints, tolerations, (NO_EXECUTE,))
    return True, True
