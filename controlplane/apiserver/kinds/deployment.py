"""apps/v1 Deployment (stored, not rolled out: there is no deployment controller yet)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.kinds.workload import Workload
from controlplane.apiserver.meta import age
from controlplane.apiserver.protobuf import LABEL_SELECTOR, OBJECT_META, TEMPLATE

Obj = dict[str, Any]


class Deployment(Workload):
    kind = "Deployment"
    plural = "deployments"
    short_names = ("deploy",)
    schema = "V1Deployment"
    protobuf = {1: ("metadata", "message", OBJECT_META), 2: ("spec", "message", {
        1: ("replicas", "int*", None), 2: ("selector", "message", LABEL_SELECTOR), 3: ("template", "message", TEMPLATE),
        5: ("minReadySeconds", "int", None), 6: ("revisionHistoryLimit", "int*", None),
        9: ("progressDeadlineSeconds", "int*", None)})}
    columns = (
        tables.NAME, tables.column("Ready", desc="Number of the pod with ready state"),
        tables.column("Up-to-date", kind="integer", desc="Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
        tables.column("Available", kind="integer", desc="Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
        tables.AGE, tables.TEMPLATE_CONTAINERS, tables.TEMPLATE_IMAGES,
        tables.column("Selector", 1, desc="Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment."),
    )

    def default(self, obj: Obj, creating: bool) -> None:
        spec = obj.setdefault("spec", {})
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        super().default(obj, creating)

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"), f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0), age(obj),
            names, images, tables.format_selector(spec.get("selector")),
        ]


KIND = Deployment()
