"""Pod metrics from metrics.k8s.io (upstream's resource metrics client,
pkg/controller/podautoscaler/metrics/client.go): each pod's usage of a resource summed over its
containers (or the one named), in milli-units, with the sample's timestamp and window; a pod whose
sample lacks the resource for a container is left out (it counts as missing)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from controlplane.controllers.podautoscaler.replicas import PodMetric
from kubeclient.client import KubeClient
from kubeclient.duration import parse_duration
from kubeclient.errors import ApiError
from kubeclient.quantity import milli_value

Obj = dict[str, Any]


class MetricsError(Exception):
    pass


def pod_metrics(items: list[Obj], resource: str, container: str = "") -> dict[str, PodMetric]:
    out: dict[str, PodMetric] = {}
    for item in items:
        total, missing, seen = 0, False, False
        for c in item.get("containers") or []:
            if container and c.get("name") != container:
                continue
            usage = (c.get("usage") or {}).get(resource)
            if usage is None:
                missing = True
                break
            total += milli_value(usage)
            seen = True
        if missing or (container and not seen):
            continue
        stamp = datetime.fromisoformat(str(item.get("timestamp", "")).replace("Z", "+00:00"))
        out[item["metadata"]["name"]] = PodMetric(total, stamp, parse_duration(item.get("window") or "0s"))
    return out


async def fetch(
    client: KubeClient, namespace: str, selector: str, resource: str, container: str = ""
) -> dict[str, PodMetric]:
    try:
        doc = await client.get(
            f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods", labelSelector=selector
        )
    except ApiError as err:
        raise MetricsError(f"unable to fetch metrics from resource metrics API: {err.message}") from None
    items = doc.get("items") or []
    if not items:
        raise MetricsError("no metrics returned from resource metrics API")
    return pod_metrics(items, resource, container)
