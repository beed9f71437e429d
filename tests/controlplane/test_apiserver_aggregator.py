"""The aggregation layer at the API server alone: a real HTTPS server stands in for an extension API
server (it requires a client certificate from the front-proxy CA, as a requestheader authenticator
does). APIService validation, the Available condition and its reasons, discovery including the
aggregated group, requests proxied with X-Remote-* headers (never the caller's credentials), the
caBundle checked for `<service>.<namespace>.svc`, and authorization before anything is proxied."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubeclient.serving import ensure_self_signed
from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration  # real servers, etcd or processes


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address")


@dataclass
class Backend:
    host: str
    port: int
    ca: bytes  # its serving certificate (self-signed: its own CA bundle)
    seen: list[dict[str, Any]] = field(default_factory=list)


def _serve(
    host: str, group: str, cert: Path, key: Path, client_ca: Path
) -> tuple[ThreadingHTTPServer, Backend]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.load_verify_locations(client_ca)
    context.verify_mode = ssl.CERT_REQUIRED
    backend = Backend(host, 0, cert.read_bytes())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = self.connection.getpeercert()
            backend.seen.append(
                {
                    "path": self.path,
                    "user": self.headers.get_all("X-Remote-User"),
                    "groups": self.headers.get_all("X-Remote-Group") or [],
                    "extra": {
                        k: v for k, v in self.headers.items() if k.lower().startswith("x-remote-extra-")
                    },
                    "authorization": self.headers.get("Authorization"),
                    "cn": dict(x[0] for x in peer.get("subject", ())).get("commonName", ""),
                }
            )
            if self.path == f"/apis/{group}/v1":
                doc: dict[str, Any] = {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{group}/v1",
                    "resources": [
                        {
                            "name": "widgets",
                            "singularName": "",
                            "namespaced": True,
                            "kind": "Widget",
                            "verbs": ["get", "list"],
                        }
                    ],
                }
            else:
                doc = {
                    "kind": "WidgetList",
                    "apiVersion": f"{group}/v1",
                    "metadata": {},
                    "items": [],
                    "path": self.path,
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
    backend.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, backend


def _proxied(backend: Backend) -> list[dict[str, Any]]:
    """What callers' requests brought to the backend; the aggregator's own (discovery checks, OpenAPI
    fetches, as upstream's run in the background) left out."""
    return [s for s in backend.seen if s["user"] != ["system:kube-aggregator"]]


@pytest.fixture
def group() -> str:
    return f"w{uuid.uuid4().hex[:8]}.example.com"


@pytest.fixture
def backend(apiserver: ApiServer, group: str, tmp_path: Path, namespace: str) -> Iterator[Backend]:
    host = _host_ip()
    cert, key = ensure_self_signed(tmp_path, f"api.{namespace}.svc", [host], stem="serving")
    httpd, served = _serve(host, group, cert, key, apiserver.data_dir / "pki" / "front-proxy-ca.crt")
    yield served
    httpd.shutdown()
    httpd.server_close()


def _publish(v1: client.CoreV1Api, namespace: str, backend: Backend) -> None:
    v1.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "api"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": backend.port}]},
        },
    )
    v1.create_namespaced_endpoints(
        namespace,
        {
            "metadata": {"name": "api"},
            "subsets": [
                {"addresses": [{"ip": backend.host}], "ports": [{"name": "https", "port": backend.port}]}
            ],
        },
    )


def _apiservice(group: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"v1.{group}"},
        "spec": {
            "group": group,
            "version": "v1",
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
            "service": {"namespace": namespace, "name": "api", "port": 443},
            **spec,
        },
    }


def _custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _create(api: client.ApiClient, body: dict[str, Any]) -> None:
    _custom(api).create_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", body)


def _available(api: client.ApiClient, name: str, timeout: float = 30.0) -> dict[str, Any]:
    """The Available condition once the check has written one with a final answer."""
    import time

    deadline = time.monotonic() + timeout
    cond: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = _custom(api).get_cluster_custom_object("apiregistration.k8s.io", "v1", "apiservices", name)
        cond = next(
            (c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Available"), {}
        )
        if cond:
            return cond
        time.sleep(0.1)
    raise AssertionError(f"no Available condition on {name} after {timeout} s")


def _wait_reason(api: client.ApiClient, name: str, reason: str, timeout: float = 40.0) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + timeout
    cond: dict[str, Any] = {}
    while time.monotonic() < deadline:
        cond = _available(api, name)
        if cond["reason"] == reason:
            return cond
        time.sleep(0.2)
    raise AssertionError(f"{name}: wanted {reason}, last {cond}")


def _admin_get(apiserver: ApiServer, path: str, headers: dict[str, str]) -> int:
    """A GET as the administrator with headers kubectl cannot send; the status code."""
    pki = apiserver.data_dir / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    conn = http.client.HTTPSConnection(
        "127.0.0.1", int(apiserver.url.rsplit(":", 1)[1]), context=ctx, timeout=30
    )
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _kubectl(apiserver: ApiServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def cleanup(api: client.ApiClient, group: str) -> Iterator[None]:
    yield
    try:
        _custom(api).delete_cluster_custom_object(
            "apiregistration.k8s.io", "v1", "apiservices", f"v1.{group}"
        )
    except ApiException:
        pass


def test_requests_are_proxied_with_the_user_in_requestheader_headers(
    apiserver: ApiServer,
    api: client.ApiClient,
    v1: client.CoreV1Api,
    namespace: str,
    backend: Backend,
    group: str,
    cleanup: None,
) -> None:
    _publish(v1, namespace, backend)
    _create(api, _apiservice(group, namespace, caBundle=base64.b64encode(backend.ca).decode()))
    cond = _wait_reason(api, f"v1.{group}", "Passed")
    assert (cond["status"], cond["message"]) == ("True", "all checks passed")
    groups = json.loads(_kubectl(apiserver, "get", "--raw", "/apis").stdout)["groups"]
    assert group in [g["name"] for g in groups]
    assert (
        json.loads(_kubectl(apiserver, "get", "--raw", f"/apis/{group}").stdout)["preferredVersion"][
            "version"
        ]
        == "v1"
    )
    done = _kubectl(apiserver, "get", "--raw", f"/apis/{group}/v1/namespaces/{namespace}/widgets?limit=5")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["path"] == f"/apis/{group}/v1/namespaces/{namespace}/widgets?limit=5"
    seen = _proxied(backend)[-1]
    assert seen["cn"] == "front-proxy-client" and seen["authorization"] is None
    assert seen["user"] == ["kubernetes-admin"]
    assert set(seen["groups"]) == {"system:masters", "system:authenticated"}
    # kubectl's aggregated discovery knows the backend's resources
    listed = _kubectl(apiserver, "api-resources", "--api-group", group, "--no-headers")
    assert listed.returncode == 0 and listed.stdout.split()[0] == "widgets", listed
    # a client's own X-Remote-* never reaches the backend: the front proxy's headers replace them
    assert (
        _admin_get(
            apiserver, f"/apis/{group}/v1/widgets", {"X-Remote-User": "mallory", "X-Remote-Group": "evil"}
        )
        == 200
    )
    assert (
        _proxied(backend)[-1]["user"] == ["kubernetes-admin"]
        and "evil" not in _proxied(backend)[-1]["groups"]
    )


def test_an_impersonated_user_is_authorized_here_and_carried_with_extras(
    apiserver: ApiServer,
    api: client.ApiClient,
    v1: client.CoreV1Api,
    namespace: str,
    backend: Backend,
    group: str,
    cleanup: None,
) -> None:
    _publish(v1, namespace, backend)
    _create(api, _apiservice(group, namespace, caBundle=base64.b64encode(backend.ca).decode()))
    _wait_reason(api, f"v1.{group}", "Passed")
    before = len(_proxied(backend))
    denied = _kubectl(apiserver, "get", "--raw", f"/apis/{group}/v1/widgets", "--as", "alice")
    assert denied.returncode != 0
    assert f'widgets.{group} is forbidden: User "alice" cannot list resource "widgets"' in denied.stderr
    assert len(_proxied(backend)) == before  # refused before anything was proxied
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_cluster_role(
        {
            "metadata": {"name": f"read-{group}"},
            "rules": [{"apiGroups": [group], "resources": ["widgets"], "verbs": ["list"]}],
        }
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": f"alice-{group}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"read-{group}",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        }
    )
    try:
        import time

        deadline = time.monotonic() + 10
        while True:
            code = _admin_get(
                apiserver,
                f"/apis/{group}/v1/widgets",
                {
                    "Impersonate-User": "alice",
                    "Impersonate-Group": "dev",
                    "Impersonate-Extra-Scopes.example.com%2fx": "a",
                },
            )
            if code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 200
        seen = _proxied(backend)[-1]
        assert seen["user"] == ["alice"] and set(seen["groups"]) == {"dev", "system:authenticated"}
        # the key as impersonation read it (lower case, unescaped), then escaped as upstream's headerKeyEscape
        assert seen["extra"] == {"X-Remote-Extra-scopes.example.com%2Fx": "a"}
    finally:
        rbac.delete_cluster_role_binding(f"alice-{group}")
        rbac.delete_cluster_role(f"read-{group}")


def test_a_wrong_ca_bundle_fails_the_discovery_check_and_requests_get_503(
    apiserver: ApiServer,
    api: client.ApiClient,
    v1: client.CoreV1Api,
    namespace: str,
    backend: Backend,
    group: str,
    tmp_path: Path,
    cleanup: None,
) -> None:
    _publish(v1, namespace, backend)
    other, _ = ensure_self_signed(tmp_path / "other", f"api.{namespace}.svc", [], stem="other")
    _create(api, _apiservice(group, namespace, caBundle=base64.b64encode(other.read_bytes()).decode()))
    cond = _wait_reason(api, f"v1.{group}", "FailedDiscoveryCheck")
    assert cond["status"] == "False" and cond["message"].startswith(
        f"failing or missing response from https://{backend.host}:{backend.port}/apis/{group}/v1"
    )
    out = _kubectl(apiserver, "get", "--raw", f"/apis/{group}/v1/widgets")
    assert out.returncode != 0 and "the server is currently unable to handle the request" in out.stderr, out
    printed = _kubectl(apiserver, "get", "apiservice", f"v1.{group}", "--no-headers").stdout.split()
    assert printed[:4] == [f"v1.{group}", f"{namespace}/api", "False", "(FailedDiscoveryCheck)"]


def test_insecure_skip_tls_verify_is_available(
    api: client.ApiClient, v1: client.CoreV1Api, namespace: str, backend: Backend, group: str, cleanup: None
) -> None:
    _publish(v1, namespace, backend)
    _create(api, _apiservice(group, namespace, insecureSkipTLSVerify=True))
    assert _wait_reason(api, f"v1.{group}", "Passed")["status"] == "True"


def test_missing_service_and_endpoints_are_reported(
    api: client.ApiClient, v1: client.CoreV1Api, namespace: str, backend: Backend, group: str, cleanup: None
) -> None:
    _create(api, _apiservice(group, namespace, insecureSkipTLSVerify=True))
    cond = _wait_reason(api, f"v1.{group}", "ServiceNotFound")
    assert cond["message"] == f'service/api in "{namespace}" is not present'
    v1.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "api"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": backend.port}]},
        },
    )
    # As upstream's controller, a change of the Service or its Endpoints runs the check again at once
    # (not only the 30 s resync): 5 s is far inside it.
    cond = _wait_reason(api, f"v1.{group}", "EndpointsNotFound", timeout=5.0)
    assert cond["message"] == f'cannot find endpoints for service/api in "{namespace}"'
    v1.create_namespaced_endpoints(
        namespace,
        {
            "metadata": {"name": "api"},
            "subsets": [
                {"addresses": [{"ip": backend.host}], "ports": [{"name": "https", "port": backend.port}]}
            ],
        },
    )
    assert _wait_reason(api, f"v1.{group}", "Passed", timeout=5.0)["status"] == "True"


def test_apiservice_validation(api: client.ApiClient, namespace: str, group: str) -> None:
    bad_name = _apiservice(group, namespace, insecureSkipTLSVerify=True)
    bad_name["metadata"]["name"] = f"v2.{group}"
    with pytest.raises(ApiException) as err:
        _create(api, bad_name)
    message = json.loads(err.value.body)["message"]
    assert (
        err.value.status == 422
        and f'metadata.name: Invalid value: "v2.{group}": must be `spec.version+"."+spec.group`' in message
    )
    both = _apiservice(group, namespace, insecureSkipTLSVerify=True, caBundle=base64.b64encode(b"x").decode())
    with pytest.raises(ApiException) as err:
        _create(api, both)
    assert (
        err.value.status == 422
        and "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"
        in json.loads(err.value.body)["message"]
    )
    priority = _apiservice(group, namespace, insecureSkipTLSVerify=True, versionPriority=0)
    with pytest.raises(ApiException) as err:
        _create(api, priority)
    assert "spec.versionPriority: Invalid value: 0: must be positive and less than 1000" in err.value.body
