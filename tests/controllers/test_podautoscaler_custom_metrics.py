"""The HPA on Pods, Object and External metrics, in-process against the real API server, the metrics
served by a real HTTPS server behind APIServices for custom.metrics.k8s.io/v1beta2 and
external.metrics.k8s.io/v1beta1 (reached through the aggregator with the front-proxy certificate, as
a custom metrics adapter is): the query the controller sends (pod selector, metric selector), the
replica count upstream's calculator gives, currentMetrics in upstream's shape; and without an APIService
the condition and event upstream writes (FailedGetExternalMetric)."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes import client

from kubeclient.serving import ensure_self_signed
from pykubelet.rig.apiserver import ApiServer
from tests.controllers.conftest import eventually, mark_ready, running

CUSTOM, EXTERNAL = "custom.metrics.k8s.io", "external.metrics.k8s.io"


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address")


class Adapter:
    """A custom/external metrics adapter: values set by the test, every query remembered."""

    def __init__(self) -> None:
        self.pods: dict[str, str] = {}
        self.objects: dict[str, str] = {}
        self.external: dict[str, list[str]] = {}
        self.queries: list[tuple[str, dict[str, list[str]]]] = []


def _resource_list(gv: str) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": []}


@pytest.fixture
def adapter(
    apiserver: ApiServer, api: client.ApiClient, v1: client.CoreV1Api, tmp_path: Path
) -> Iterator[Adapter]:
    host = _host_ip()
    cert, key = ensure_self_signed(tmp_path, "adapter.kube-system.svc", [host], stem="serving")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(apiserver.data_dir / "pki" / "front-proxy-ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    state = Adapter()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            parts = url.path.strip("/").split("/")
            doc: dict[str, Any]
            if url.path in (f"/apis/{CUSTOM}/v1beta2", f"/apis/{EXTERNAL}/v1beta1"):
                doc = _resource_list(url.path.removeprefix("/apis/"))
            elif parts[:3] == ["apis", CUSTOM, "v1beta2"] and parts[5:7] == ["pods", "*"]:
                state.queries.append((url.path, query))
                doc = {
                    "kind": "MetricValueList",
                    "apiVersion": f"{CUSTOM}/v1beta2",
                    "metadata": {},
                    "items": [
                        {
                            "describedObject": {
                                "kind": "Pod",
                                "namespace": parts[4],
                                "name": n,
                                "apiVersion": "/v1",
                            },
                            "metric": {"name": parts[7]},
                            "timestamp": "2026-01-01T00:00:00Z",
                            "windowSeconds": 30,
                            "value": v,
                        }
                        for n, v in state.pods.items()
                    ],
                }
            elif parts[:3] == ["apis", CUSTOM, "v1beta2"]:
                state.queries.append((url.path, query))
                doc = {
                    "kind": "MetricValueList",
                    "apiVersion": f"{CUSTOM}/v1beta2",
                    "metadata": {},
                    "items": [
                        {
                            "describedObject": {"kind": "Deployment", "name": parts[6]},
                            "metric": {"name": parts[7]},
                            "timestamp": "2026-01-01T00:00:00Z",
                            "value": state.objects.get(f"{parts[5]}/{parts[6]}/{parts[7]}", "0"),
                        }
                    ],
                }
            else:
                state.queries.append((url.path, query))
                doc = {
                    "kind": "ExternalMetricValueList",
                    "apiVersion": f"{EXTERNAL}/v1beta1",
                    "metadata": {},
                    "items": [
                        {
                            "metricName": parts[-1],
                            "metricLabels": {},
                            "timestamp": "2026-01-01T00:00:00Z",
                            "value": v,
                        }
                        for v in state.external.get(parts[-1], [])
                    ],
                }
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((host, 0), Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    v1.create_namespaced_service(
        "kube-system",
        {
            "metadata": {"name": "adapter"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        },
    )
    v1.create_namespaced_endpoints(
        "kube-system",
        {
            "metadata": {"name": "adapter"},
            "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": port}]}],
        },
    )
    registration = client.ApiregistrationV1Api(api)
    for group, version in ((CUSTOM, "v1beta2"), (EXTERNAL, "v1beta1")):
        registration.create_api_service(
            {
                "metadata": {"name": f"{version}.{group}"},
                "spec": {
                    "group": group,
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 200,
                    "insecureSkipTLSVerify": True,
                    "service": {"namespace": "kube-system", "name": "adapter", "port": 443},
                },
            }
        )
    yield state
    for name in (f"v1beta2.{CUSTOM}", f"v1beta1.{EXTERNAL}"):
        registration.delete_api_service(name)
    v1.delete_namespaced_service("adapter", "kube-system")
    v1.delete_namespaced_endpoints("adapter", "kube-system")
    httpd.shutdown()
    httpd.server_close()


def _deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


def _hpa(name: str, metrics: list[dict[str, Any]], maximum: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": maximum,
            "metrics": metrics,
        },
    }


async def _ready_pods(v1: client.CoreV1Api, namespace: str, app: str, count: int) -> list[str]:
    def pods() -> list[client.V1Pod] | None:
        items = v1.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        return items if len(items) >= count else None

    found = await eventually(pods, what=f"{count} pods of {app}")
    for pod in found:
        mark_ready(v1, pod)
    return [p.metadata.name for p in found]


async def test_pods_metric_scales_on_the_average(apiserver, api, v1, apps, namespace, adapter) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("web", 2))
    metric = {
        "type": "Pods",
        "pods": {
            "metric": {"name": "requests", "selector": {"matchLabels": {"verb": "GET"}}},
            "target": {"type": "AverageValue", "averageValue": "100"},
        },
    }
    async with running(apiserver, "deployment", "replicaset"):
        names = await _ready_pods(v1, namespace, "web", 2)
    adapter.pods = {n: "300" for n in names}
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("web", [metric]))
    async with running(apiserver, "horizontalpodautoscaling"):
        await eventually(
            lambda: apps.read_namespaced_deployment("web", namespace).spec.replicas == 4, what="web at 4"
        )
        hpa = await eventually(
            lambda: (
                (
                    h := autoscaling.read_namespaced_horizontal_pod_autoscaler("web", namespace)
                ).status.current_metrics
                and h
            ),
            what="currentMetrics",
        )
    (current,) = hpa.status.current_metrics
    assert current.type == "Pods" and current.pods.metric.name == "requests"
    assert current.pods.current.average_value == "300"
    active = next(c for c in hpa.status.conditions if c.type == "ScalingActive")
    assert (active.reason, active.message) == (
        "ValidMetricFound",
        "the HPA was able to successfully calculate a replica count from pods metric requests",
    )
    path, query = next(q for q in adapter.queries if "/pods/*/requests" in q[0])
    assert path == f"/apis/{CUSTOM}/v1beta2/namespaces/{namespace}/pods/*/requests"
    assert query["labelSelector"] == ["app=web"] and query["metricLabelSelector"] == ["verb=GET"]


async def test_object_and_external_metrics_take_the_higher_proposal(
    apiserver, api, v1, apps, namespace, adapter
) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("queue", 1))
    async with running(apiserver, "deployment", "replicaset"):
        await _ready_pods(v1, namespace, "queue", 1)
    adapter.objects = {"deployments.apps/queue/hits": "20"}  # value 20 against 10: 2 x 1 ready pod
    adapter.external = {"queue_length": ["4", "5"]}  # 9 against 3 per pod: 3 replicas
    metrics = [
        {
            "type": "Object",
            "object": {
                "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "queue"},
                "metric": {"name": "hits"},
                "target": {"type": "Value", "value": "10"},
            },
        },
        {
            "type": "External",
            "external": {
                "metric": {"name": "queue_length"},
                "target": {"type": "AverageValue", "averageValue": "3"},
            },
        },
    ]
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("queue", metrics))
    async with running(apiserver, "horizontalpodautoscaling"):
        await eventually(
            lambda: apps.read_namespaced_deployment("queue", namespace).spec.replicas == 3, what="queue at 3"
        )
        hpa = await eventually(
            lambda: (
                (
                    h := autoscaling.read_namespaced_horizontal_pod_autoscaler("queue", namespace)
                ).status.current_metrics
                and h
            ),
            what="currentMetrics",
        )
    obj, ext = hpa.status.current_metrics
    assert (obj.type, obj.object.current.value, obj.object.described_object.name) == ("Object", "20", "queue")
    assert (ext.type, ext.external.current.average_value) == ("External", "9")
    active = next(c for c in hpa.status.conditions if c.type == "ScalingActive")
    assert active.message.endswith("from external metric queue_length(nil)")
    assert any(
        p == f"/apis/{CUSTOM}/v1beta2/namespaces/{namespace}/deployments.apps/queue/hits"
        for p, _ in adapter.queries
    )
    assert any(
        p == f"/apis/{EXTERNAL}/v1beta1/namespaces/{namespace}/queue_length" for p, _ in adapter.queries
    )


async def test_without_an_external_metrics_api_the_hpa_says_so(apiserver, api, v1, apps, namespace) -> None:
    autoscaling = client.AutoscalingV2Api(api)
    apps.create_namespaced_deployment(namespace, _deployment("lonely", 1))
    metric = {
        "type": "External",
        "external": {"metric": {"name": "queue_length"}, "target": {"type": "Value", "value": "3"}},
    }
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, _hpa("lonely", [metric]))
    async with running(apiserver, "horizontalpodautoscaling"):
        active = await eventually(
            lambda: next(
                (
                    c
                    for c in autoscaling.read_namespaced_horizontal_pod_autoscaler(
                        "lonely", namespace
                    ).status.conditions
                    or []
                    if c.type == "ScalingActive"
                ),
                None,
            ),
            what="ScalingActive",
        )
    assert (active.status, active.reason) == ("False", "FailedGetExternalMetric")
    assert active.message == (
        f"the HPA was unable to compute the replica count: unable to get external metric {namespace}/queue_length/nil: "
        "unable to fetch metrics from external metrics API: the server could not find the requested resource "
        f"(get {EXTERNAL})"
    )
    assert apps.read_namespaced_deployment("lonely", namespace).spec.replicas == 1
