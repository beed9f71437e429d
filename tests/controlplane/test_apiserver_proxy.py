"""pods/proxy, services/proxy and nodes/proxy at the API server alone: a real HTTP server stands in for
the pod, the service's endpoint and (over TLS, checking the client certificate) the kubelet. What the
target sees (method, the path after /proxy/ with its query, the body, never the caller's credentials),
the answer relayed, and upstream's refusals (a loopback pod IP, a service without endpoints)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration  # real servers, etcd or processes


def _host_ip() -> str:
    """A non-loopback address of this machine (upstream refuses to proxy to loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address")


def _serve(host: str, context: ssl.SSLContext | None = None) -> tuple[ThreadingHTTPServer, list[dict]]:
    seen: list[dict] = []

    class Target(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            peer = self.connection.getpeercert() if context else None
            seen.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "body": self.rfile.read(length),
                    "headers": dict(self.headers),
                    "cn": dict(x[0] for x in (peer or {}).get("subject", ())).get("commonName", ""),
                }
            )
            body = json.dumps({"served": self.path}).encode()
            self.send_response(201 if self.command == "POST" else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Target", "yes")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((host, 0), Target)
    if context is not None:
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, seen


@pytest.fixture
def target() -> Iterator[tuple[str, int, list[dict]]]:
    host = _host_ip()
    httpd, seen = _serve(host)
    yield host, httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


def _raw(apiserver: ApiServer, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), "get", "--raw", path],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_pod_proxy_relays_requests_to_the_pod(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, target
) -> None:
    host, port, seen = target
    v1.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    v1.patch_namespaced_pod_status("web", namespace, {"status": {"podIP": host, "podIPs": [{"ip": host}]}})
    done = _raw(apiserver, f"/api/v1/namespaces/{namespace}/pods/web:{port}/proxy/some/path/?x=1&y=two")
    assert done.returncode == 0 and json.loads(done.stdout) == {"served": "/some/path/?x=1&y=two"}, done
    assert seen[-1]["method"] == "GET" and "Authorization" not in seen[-1]["headers"]
    v1.connect_post_namespaced_pod_proxy_with_path(f"web:{port}", namespace, "submit")
    assert (seen[-1]["method"], seen[-1]["path"]) == ("POST", "/submit")
    v1.patch_namespaced_pod_status(
        "web", namespace, {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}
    )
    with pytest.raises(ApiException) as err:
        v1.connect_get_namespaced_pod_proxy_with_path(f"web:{port}", namespace, "x")
    assert err.value.status == 400 and "address not allowed" in err.value.body


def test_pod_proxy_without_a_port_uses_the_first_declared_one(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, target
) -> None:
    """Upstream's pod ResourceLocation: no port in the name -> the first port a container declares."""
    host, port, seen = target
    containers = [
        client.V1Container(name="plain", image="busybox"),
        client.V1Container(
            name="served",
            image="busybox",
            ports=[client.V1ContainerPort(container_port=port), client.V1ContainerPort(container_port=1)],
        ),
    ]
    v1.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="ported"), spec=client.V1PodSpec(containers=containers)
        ),
    )
    v1.patch_namespaced_pod_status("ported", namespace, {"status": {"podIP": host, "podIPs": [{"ip": host}]}})
    done = _raw(apiserver, f"/api/v1/namespaces/{namespace}/pods/ported/proxy/here")
    assert done.returncode == 0 and json.loads(done.stdout) == {"served": "/here"}, done
    assert seen[-1]["path"] == "/here"


def test_service_proxy_reaches_an_endpoint(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, target
) -> None:
    host, port, seen = target
    v1.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="svc"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(name="http", port=80, target_port=port)]),
        ),
    )
    with pytest.raises(ApiException) as err:
        v1.connect_get_namespaced_service_proxy_with_path("svc:http", namespace, "x")
    assert err.value.status == 503 and 'no endpoints available for service \\"svc\\"' in err.value.body
    v1.create_namespaced_endpoints(
        namespace,
        client.V1Endpoints(
            metadata=client.V1ObjectMeta(name="svc"),
            subsets=[
                client.V1EndpointSubset(
                    addresses=[client.V1EndpointAddress(ip=host)],
                    ports=[client.CoreV1EndpointPort(name="http", port=port)],
                )
            ],
        ),
    )
    done = _raw(apiserver, f"/api/v1/namespaces/{namespace}/services/svc:http/proxy/index.html")
    assert done.returncode == 0 and json.loads(done.stdout) == {"served": "/index.html"}, done


def test_node_proxy_reaches_the_kubelet_with_the_servers_identity(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str
) -> None:
    from controlplane.apiserver.certs import ensure_pki

    pki = ensure_pki(apiserver.data_dir)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_cert))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_cert_chain(pki.serving_cert, pki.serving_key)
    httpd, seen = _serve("127.0.0.1", ctx)
    node = f"proxied-{namespace}"
    try:
        v1.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
        v1.patch_node_status(
            node,
            {
                "status": {
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": httpd.server_address[1]}},
                }
            },
        )
        done = _raw(apiserver, f"/api/v1/nodes/{node}/proxy/stats/summary?only_cpu_and_memory=true")
        assert done.returncode == 0 and json.loads(done.stdout) == {
            "served": "/stats/summary?only_cpu_and_memory=true"
        }, done
        assert seen[-1]["cn"] == "kube-apiserver-kubelet-client"
    finally:
        httpd.shutdown()
        httpd.server_close()
        v1.delete_node(node)


def test_proxy_is_listed_and_authorized_by_method(apiserver: ApiServer) -> None:
    listed = {r["name"]: r for r in json.loads(_raw(apiserver, "/api/v1").stdout)["resources"]}
    for name, kind in (
        ("pods/proxy", "PodProxyOptions"),
        ("services/proxy", "ServiceProxyOptions"),
        ("nodes/proxy", "NodeProxyOptions"),
    ):
        assert listed[name]["kind"] == kind
        assert sorted(listed[name]["verbs"]) == ["create", "delete", "get", "patch", "update"]
    done = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(apiserver.kubeconfig),
            "--as",
            "mallory",
            "get",
            "--raw",
            "/api/v1/nodes/any/proxy/healthz",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and 'cannot get resource "nodes/proxy"' in done.stderr, done


def test_the_proxied_path_is_what_follows_proxy() -> None:
    from controlplane.apiserver.request import parse_path
    from controlplane.apiserver.resourceproxy import split_name

    info = parse_path("", "v1", "namespaces/ns/pods/web:80/proxy/a/b/")
    assert (info.namespace, info.name, info.subresource, info.subpath) == ("ns", "web:80", "proxy", "a/b/")
    info = parse_path("", "v1", "namespaces/ns/pods/proxy/proxy/proxy/x")
    assert (info.name, info.subpath) == ("proxy", "proxy/x")
    assert parse_path("", "v1", "nodes/n1/proxy").subpath == ""
    assert split_name("https:web:8443") == ("https", "web", "8443")
    assert split_name("web") == ("", "web", "")
