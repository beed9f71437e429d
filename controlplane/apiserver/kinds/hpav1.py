"""autoscaling/v1 HorizontalPodAutoscaler (what `kubectl autoscale` 1.32 posts): stored as autoscaling/v2
and converted at the edge, as upstream's conversion does. targetCPUUtilizationPercentage is the cpu
Utilization metric; what v1 cannot say (other metrics, behavior, conditions, current metrics) travels
in upstream's `autoscaling.alpha.kubernetes.io/*` annotations so a read-modify-write through v1 keeps it
(here in the v2 shapes)."""

from __future__ import annotations

import json
from typing import Any

from controlplane.apiserver.errors import FieldError
from controlplane.apiserver.kinds.base import Kind, StatusSubresource
from controlplane.apiserver.kinds.hpa import COLUMNS, cells
from controlplane.apiserver.kinds.hpa import KIND as V2

Obj = dict[str, Any]
METRICS = "autoscaling.alpha.kubernetes.io/metrics"
BEHAVIOR = "autoscaling.alpha.kubernetes.io/behavior"
CONDITIONS = "autoscaling.alpha.kubernetes.io/conditions"
CURRENT = "autoscaling.alpha.kubernetes.io/current-metrics"


def _is_cpu_utilization(metric: Obj) -> bool:
    resource = metric.get("resource") or {}
    target = resource.get("target") or {}
    return (
        metric.get("type") == "Resource"
        and resource.get("name") == "cpu"
        and target.get("type") == "Utilization"
    )


class HorizontalPodAutoscalerV1(Kind):
    group = "autoscaling"
    version = "v1"
    kind = "HorizontalPodAutoscaler"
    plural = "horizontalpodautoscalers"
    short_names = ("hpa",)
    categories = ("all",)
    schema = "V1HorizontalPodAutoscaler"
    storage_bucket = V2.bucket
    converts = True
    subresources = (StatusSubresource(),)
    generation = True
    columns = COLUMNS  # tables are built from the stored (v2) form

    @property
    def storage_schema(self) -> str:
        return V2.schema

    def default(self, obj: Obj, creating: bool) -> None:
        V2.default(obj, creating)

    def prepare_for_create(self, obj: Obj) -> None:
        V2.prepare_for_create(obj)

    def validate_spec(self, obj: Obj) -> list[FieldError]:
        return V2.validate_spec(obj)

    def to_storage(self, obj: Obj) -> Obj:
        meta = dict(obj.get("metadata") or {})
        annotations = dict(meta.get("annotations") or {})
        spec = dict(obj.get("spec") or {})
        metrics: list[Obj] = []
        cpu = spec.pop("targetCPUUtilizationPercentage", None)
        if cpu is not None:
            metrics.append(
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}},
                }
            )
        extra = annotations.pop(METRICS, None)
        if extra:
            metrics += [m for m in json.loads(extra) if not _is_cpu_utilization(m)]
        if metrics:
            spec["metrics"] = metrics
        behavior = annotations.pop(BEHAVIOR, None)
        if behavior:
            spec["behavior"] = json.loads(behavior)
        for key in (CONDITIONS, CURRENT):
            annotations.pop(key, None)
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)
        out: Obj = {"apiVersion": V2.api_version, "kind": V2.kind, "metadata": meta, "spec": spec}
        status = obj.get("status")
        if isinstance(status, dict):
            out["status"] = {
                k: status[k]
                for k in ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas")
                if k in status
            }
        return out

    def from_storage(self, obj: Obj) -> Obj:
        meta = dict(obj.get("metadata") or {})
        annotations = dict(meta.get("annotations") or {})
        spec = dict(obj.get("spec") or {})
        metrics = spec.pop("metrics", None) or []
        cpu = next((m for m in metrics if _is_cpu_utilization(m)), None)
        if cpu is not None:
            spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"]["averageUtilization"]
        others = [m for m in metrics if m is not cpu]
        if others:
            annotations[METRICS] = json.dumps(others, separators=(",", ":"))
        behavior = spec.pop("behavior", None)
        if behavior:
            annotations[BEHAVIOR] = json.dumps(behavior, separators=(",", ":"))
        status_in = obj.get("status") or {}
        status: Obj = {
            k: status_in[k]
            for k in ("observedGeneration", "lastScaleTime", "currentReplicas", "desiredReplicas")
            if k in status_in
        }
        status.setdefault("currentReplicas", 0)
        status.setdefault("desiredReplicas", 0)
        for current in status_in.get("currentMetrics") or []:
            resource = current.get("resource") or {}
            used = (resource.get("current") or {}).get("averageUtilization")
            if current.get("type") == "Resource" and resource.get("name") == "cpu" and used is not None:
                status["currentCPUUtilizationPercentage"] = used
        if status_in.get("conditions"):
            annotations[CONDITIONS] = json.dumps(status_in["conditions"], separators=(",", ":"))
        if status_in.get("currentMetrics"):
            annotations[CURRENT] = json.dumps(status_in["currentMetrics"], separators=(",", ":"))
        if annotations:
            meta["annotations"] = annotations
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": meta,
            "spec": spec,
            "status": status,
        }

    def cells(self, obj: Obj) -> list[Any]:
        return cells(obj)


KIND = HorizontalPodAutoscalerV1()
