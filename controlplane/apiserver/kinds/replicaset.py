"""apps/v1 ReplicaSet (stored, not reconciled: there is no replicaset controller yet)."""

from __future__ import annotations

from typing import Any

from controlplane.apiserver import tables
from controlplane.apiserver.kinds.workload import Workload
from controlplane.apiserver.meta import age

Obj = dict[str, Any]


class ReplicaSet(Workload):
    kind = "ReplicaSet"
    plural = "replicasets"
    short_names = ("rs",)
    schema = "V1ReplicaSet"
    columns = (
        tables.NAME,
        tables.column("Desired", kind="integer", desc="Replicas is the number of desired pods."),
        tables.column(
            "Current", kind="integer", desc="Replicas is the most recently observed number of replicas."
        ),
        tables.column("Ready", kind="integer", desc="The number of ready replicas for this replica set."),
        tables.AGE,
        tables.TEMPLATE_CONTAINERS,
        tables.TEMPLATE_IMAGES,
        tables.column(
            "Selector", 1, desc="Selector is a label query over pods that should match the replica count."
        ),
    )

    def cells(self, obj: Obj) -> list[Any]:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        names, images = tables.containers_images((spec.get("template") or {}).get("spec") or {})
        return [
            obj["metadata"].get("name"),
            spec.get("replicas", 0),
            status.get("replicas", 0),
            status.get("readyReplicas", 0),
            age(obj),
            names,
            images,
            tables.format_selector(spec.get("selector")),
        ]


KIND = ReplicaSet()
