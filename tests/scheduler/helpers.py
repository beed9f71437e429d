"""Hand-built nodes and pods for the unit tests of pure scheduler modules (no server involved)."""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.nodeinfo import NodeFacts, NodeInfo
from controlplane.scheduler.podinfo import PodInfo, pod_info

_counter = iter(range(1_000_000))


def make_pod(
    cpu: str | None = "100m", memory: str | None = "64Mi", name: str | None = None, **spec: Any
) -> PodInfo:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    container: dict[str, Any] = {
        "name": "c",
        "image": spec.pop("image", "busybox"),
        "resources": {"requests": requests},
    }
    if "ports" in spec:
        container["ports"] = spec.pop("ports")
    n = name or f"pod-{next(_counter)}"
    meta: dict[str, Any] = {
        "name": n,
        "namespace": spec.pop("namespace", "ns"),
        "uid": f"uid-{n}",
        "labels": spec.pop("labels", {}),
    }
    if "owner" in spec:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": "rs", "uid": spec.pop("owner"), "controller": True}
        ]
    return pod_info({"metadata": meta, "spec": {"containers": [container], **spec}})


def make_node(
    name: str = "n",
    cpu: str = "4",
    memory: str = "8Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    images: dict[str, int] | None = None,
    extra: dict[str, str] | None = None,
) -> NodeInfo:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}
    obj = {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {
            "allocatable": alloc,
            "images": [{"names": [i], "sizeBytes": s} for i, s in (images or {}).items()],
        },
    }
    return NodeInfo(name, NodeFacts.from_node(obj))
