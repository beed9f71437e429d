"""Custom and external metrics for the HPA, as upstream's REST metrics client
(pkg/controller/podautoscaler/metrics/client.go, customMetricsClient and externalMetricsClient over
k8s.io/metrics' clients): Pods metrics from custom.metrics.k8s.io
`namespaces/<ns>/pods/*/<metric>?labelSelector=<the target's selector>`, Object metrics from
`namespaces/<ns>/<resource>/<name>/<metric>`, External metrics from external.metrics.k8s.io
`namespaces/<ns>/<metric>`, each with `metricLabelSelector` / `labelSelector` from the metric's own
selector. Values are taken in milli-units. The custom metrics API's version is the one its discovery
prefers (v1beta2, else v1beta1, as upstream's AvailableAPIsGetter); when nothing serves the API the
error reads as client-go's NotFound does, which is what upstream's conditions carry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from controlplane.controllers.podautoscaler.replicas import PodMetric
from kubeclient.client import KubeClient
from kubeclient.errors import ApiError
from kubeclient.quantity import milli_value

Obj = dict[str, Any]
CUSTOM = "custom.metrics.k8s.io"
EXTERNAL = "external.metrics.k8s.io"
_NOT_FOUND = "the server could not find the requested resource"


class MetricsError(Exception):
    pass


def selector_string(selector: Obj | None) -> str:
    """metav1.LabelSelectorAsSelector(...).String() for the query (empty: everything)."""
    if not selector:
        return ""
    parts = [(k, f"{k}={v}") for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), sorted(expr.get("values") or [])
        if op == "In":
            parts.append((key, f"{key} in ({','.join(values)})"))
        elif op == "NotIn":
            parts.append((key, f"{key} notin ({','.join(values)})"))
        elif op == "Exists":
            parts.append((key, key))
        elif op == "DoesNotExist":
            parts.append((key, f"!{key}"))
    # labels.Selector.String(): requirements sorted by key
    return ",".join(text for _, text in sorted(parts))


def _stamp(value: Any) -> datetime:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return datetime.now(UTC)


def _window(item: Obj) -> float:
    if item.get("windowSeconds") is not None:
        return float(item["windowSeconds"])
    text = str(item.get("window") or "")
    return float(text[:-1]) if text.endswith("s") and text[:-1].replace(".", "").isdigit() else 0.0


def _failure(api: str, err: ApiError, what: str) -> MetricsError:
    message = err.message or err.reason
    if err.status == 404 and message == _NOT_FOUND:
        message = f"{_NOT_FOUND} (get {what})"
    return MetricsError(f"unable to fetch metrics from {api} metrics API: {message}")


class CustomMetricsClient:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def _custom_version(self) -> str:
        try:
            doc = await self.client.get(f"/apis/{CUSTOM}")
        except ApiError as err:
            raise _failure("custom", err, f"pods.{CUSTOM}") from None
        versions = [v.get("version") for v in doc.get("versions") or []]
        preferred = (doc.get("preferredVersion") or {}).get("version")
        for version in (preferred, "v1beta2", "v1beta1"):
            if version in versions:
                return str(version)
        raise MetricsError(
            "unable to fetch metrics from custom metrics API: no known available metric versions found"
        )

    async def pod_metrics(
        self, name: str, namespace: str, selector: str, metric_selector: Obj | None
    ) -> dict[str, PodMetric]:
        """getRawMetric: every selected pod's value of the metric."""
        version = await self._custom_version()
        params = {"labelSelector": selector}
        if metric_selector:
            params["metricLabelSelector"] = selector_string(metric_selector)
        try:
            doc = await self.client.get(
                f"/apis/{CUSTOM}/{version}/namespaces/{namespace}/pods/*/{quote(name, safe='')}", **params
            )
        except ApiError as err:
            raise _failure("custom", err, f"pods.{CUSTOM}") from None
        items = doc.get("items") or []
        if not items:
            raise MetricsError("no metrics returned from custom metrics API")
        return {
            (item.get("describedObject") or {}).get("name", ""): PodMetric(
                milli_value(str(item.get("value", "0"))), _stamp(item.get("timestamp")), _window(item)
            )
            for item in items
        }

    async def object_metric(
        self, name: str, namespace: str, resource: str, object_name: str, metric_selector: Obj | None
    ) -> tuple[int, datetime]:
        """getObjectMetric: the described object's value (milli-units)."""
        version = await self._custom_version()
        params = {"metricLabelSelector": selector_string(metric_selector)} if metric_selector else {}
        path = f"/apis/{CUSTOM}/{version}/namespaces/{namespace}/{resource}/{quote(object_name, safe='')}/{quote(name, safe='')}"
        try:
            doc = await self.client.get(path, **params)
        except ApiError as err:
            raise _failure("custom", err, f"{resource}.{CUSTOM}") from None
        items = doc.get("items") if doc.get("kind", "").endswith("List") else [doc]
        if not items:
            raise MetricsError("no metrics returned from custom metrics API")
        item = items[0]
        return milli_value(str(item.get("value", "0"))), _stamp(item.get("timestamp"))

    async def external_metric(
        self, name: str, namespace: str, metric_selector: Obj | None
    ) -> tuple[list[int], datetime]:
        """getExternalMetric: the values of every series the selector picks (milli-units)."""
        params = {"labelSelector": selector_string(metric_selector)} if metric_selector else {}
        try:
            doc = await self.client.get(
                f"/apis/{EXTERNAL}/v1beta1/namespaces/{namespace}/{quote(name, safe='')}", **params
            )
        except ApiError as err:
            raise _failure("external", err, f"{EXTERNAL}") from None
        items = doc.get("items") or []
        if not items:
            raise MetricsError("no metrics returned from external metrics API")
        return [milli_value(str(i.get("value", "0"))) for i in items], _stamp(items[0].get("timestamp"))
