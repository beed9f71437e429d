"""The metrics server as a process against the real API server, on its own identity with upstream's
RBAC: whom it believes (the X-Remote-* headers only with the API server's front-proxy certificate, read
from extension-apiserver-authentication), and that it asks the API server (SubjectAccessReview) before
answering. No node is registered, so lists are empty: what is checked is who may see them."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.waiting import wait_for
from metricsserver import manifest
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.process import Daemon, free_port
from pykubelet.rig.stack import api_call


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("ms-api")) as server:
        yield server


@pytest.fixture(scope="module")
def metrics_server(apiserver: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    d = tmp_path_factory.mktemp("ms")
    with apiserver.api_client() as api:
        for obj in manifest.rbac():
            path = (
                "/api/v1/namespaces/kube-system/serviceaccounts" if obj["kind"] == "ServiceAccount" else None
            )
            plural = obj["kind"].lower() + "s"
            ns = obj["metadata"].get("namespace")
            base = f"/apis/{obj['apiVersion']}" if "/" in obj["apiVersion"] else "/api/v1"
            path = path or (f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}")
            api_call(api, "POST", path, obj)
    kubeconfig = apiserver.client_kubeconfig(manifest.USER, manifest.GROUPS, d / "kubeconfig")
    port = free_port()
    daemon = Daemon(
        "metrics-server",
        [
            "python3",
            "-m",
            "pykubelet",
            "metrics-server",
            "--kubeconfig",
            str(kubeconfig),
            "--bind-address",
            "0.0.0.0",  # reachable at the host's address too, for the aggregator (Endpoints refuse loopback)
            "--secure-port",
            str(port),
            "--cert-dir",
            str(d / "pki"),
            "--metric-resolution",
            "2s",
        ],
        d / "ms.log",
    )
    daemon.start(lambda: _get(port, "/healthz")[0] == 200, timeout=60, interval=0.2)
    yield port
    daemon.stop()


def _context(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return ctx


def _get(
    port: int, path: str, ctx: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx or _context(), timeout=10)
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        conn.close()
    except OSError:
        return 0, None
    try:
        return response.status, json.loads(body)
    except ValueError:
        return response.status, body.decode()


NODES = "/apis/metrics.k8s.io/v1beta1/nodes"


def _host_ip() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address")


def front_proxy(apiserver: ApiServer) -> ssl.SSLContext:
    pki = apiserver.data_dir / "pki"
    return _context(pki / "front-proxy-client.crt", pki / "front-proxy-client.key")


def test_health_needs_no_credentials_the_api_does(metrics_server: int) -> None:
    assert _get(metrics_server, "/healthz")[0] == 200
    status, body = _get(metrics_server, NODES)
    assert status == 401 and body["reason"] == "Unauthorized"


def test_the_front_proxy_user_is_authorized_by_subject_access_review(
    apiserver: ApiServer, metrics_server: int
) -> None:
    status, body = _get(
        metrics_server, NODES, front_proxy(apiserver), {"X-Remote-User": "alice", "X-Remote-Group": "dev"}
    )
    assert status == 403
    assert body["message"].startswith(
        'nodes.metrics.k8s.io is forbidden: User "alice" cannot list resource "nodes" in API group "metrics.k8s.io" at the cluster scope'
    )
    status, body = _get(
        metrics_server,
        NODES,
        front_proxy(apiserver),
        {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"},
    )
    assert status == 200 and body == {
        "kind": "NodeMetricsList",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": {},
        "items": [],
    }
    status, body = _get(
        metrics_server,
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
        front_proxy(apiserver),
        {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"},
    )
    assert status == 404 and body["message"] == 'podmetrics.metrics.k8s.io "default/nope" not found'


def test_headers_from_any_other_certificate_are_not_believed(
    apiserver: ApiServer, metrics_server: int, tmp_path: Path
) -> None:
    """A client certificate of the cluster CA is its own user: its X-Remote-* headers count for nothing."""
    kubeconfig = apiserver.client_kubeconfig("bob", (), tmp_path / "bob.kubeconfig")
    import base64

    import yaml

    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    cert, key = tmp_path / "bob.crt", tmp_path / "bob.key"
    cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
    key.write_bytes(base64.b64decode(user["client-key-data"]))
    status, body = _get(
        metrics_server,
        NODES,
        _context(cert, key),
        {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"},
    )
    assert status == 403 and 'User "bob" cannot list resource "nodes"' in body["message"]


def test_discovery_documents(apiserver: ApiServer, metrics_server: int) -> None:
    status, body = _get(
        metrics_server,
        "/apis/metrics.k8s.io/v1beta1",
        front_proxy(apiserver),
        {"X-Remote-User": "system:kube-aggregator", "X-Remote-Group": "system:authenticated"},
    )
    assert status == 200
    assert [(r["name"], r["kind"], r["namespaced"], r["verbs"]) for r in body["resources"]] == [
        ("nodes", "NodeMetrics", False, ["get", "list"]),
        ("pods", "PodMetrics", True, ["get", "list"]),
    ]


def test_openapi_of_the_aggregated_server_is_merged_and_proxied(
    apiserver: ApiServer, metrics_server: int
) -> None:
    """Registered behind the API server, the metrics server's OpenAPI shows through it: /openapi/v2 holds
    its paths and NodeMetrics/PodMetrics definitions beside the built-in ones (untouched), /openapi/v3 lists its group-version and
    serves its document, and kubectl explain finds the kind."""
    import subprocess
    import time

    with apiserver.api_client() as api:
        for obj in manifest.service(_host_ip(), metrics_server):
            plural = obj["kind"].lower() + ("" if obj["kind"] == "Endpoints" else "s")
            api_call(api, "POST", f"/api/v1/namespaces/kube-system/{plural}", obj)
        api_call(api, "POST", "/apis/apiregistration.k8s.io/v1/apiservices", manifest.apiservice())

        deadline = time.monotonic() + 60
        doc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            resp = api.call_api("GET", api.configuration.host + "/openapi/v2")
            doc = json.loads(resp.read())
            if "io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics" in doc["definitions"]:
                break
            time.sleep(0.5)
        defs = doc["definitions"]
        node_metrics = defs["io.k8s.metrics.pkg.apis.metrics.v1beta1.NodeMetrics"]
        assert node_metrics["x-kubernetes-group-version-kind"] == [
            {"group": "metrics.k8s.io", "kind": "NodeMetrics", "version": "v1beta1"}
        ]
        assert "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/{name}" in doc["paths"]
        assert "/api/v1/namespaces/{namespace}/pods" in doc["paths"]  # the local document is still there
        # Its referenced types come along; the built-in ones are untouched.
        assert node_metrics["properties"]["metadata"]["$ref"] in {
            f"#/definitions/{name}"
            for name in defs
            if name.startswith("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")
        }
        assert "ownerReferences" in defs["V1ObjectMeta"]["properties"]
        resp = api.call_api("GET", api.configuration.host + "/openapi/v3")
        root = json.loads(resp.read())
        entry = root["paths"]["apis/metrics.k8s.io/v1beta1"]
        assert entry["serverRelativeURL"].startswith("/openapi/v3/apis/metrics.k8s.io/v1beta1?hash=")
        assert "api/v1" in root["paths"]
        resp = api.call_api("GET", api.configuration.host + "/openapi/v3/apis/metrics.k8s.io/v1beta1")
        v3 = json.loads(resp.read())
        assert "io.k8s.metrics.pkg.apis.metrics.v1beta1.PodMetrics" in v3["components"]["schemas"]
    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            "explain",
            "nodemetrics",
            "--api-version=metrics.k8s.io/v1beta1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "NodeMetrics sets resource usage metrics of a node." in done.stdout, done


def test_its_own_metrics_are_served_to_authorized_callers(apiserver: ApiServer, metrics_server: int) -> None:
    """/metrics as metrics-server serves it: a nonResourceURL `get` the API server must allow."""
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "dev"}
    status, body = _get(metrics_server, "/metrics", front_proxy(apiserver), alice)
    assert status == 403 and body["message"] == 'forbidden: User "alice" cannot get path "/metrics"'
    admin = {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"}

    def scraped() -> str:
        status, text = _get(metrics_server, "/metrics", front_proxy(apiserver), admin)
        assert status == 200
        return text if "metrics_server_manager_tick_duration_seconds_count" in text else ""

    text = wait_for(scraped, timeout=30, interval=0.5)
    # No Node here, so no kubelet request yet: the family is left out, as client_golang leaves it.
    assert "metrics_server_kubelet_request_total" not in text
    assert 'metrics_server_storage_points{type="node"}' in text
    assert "_created" not in text
