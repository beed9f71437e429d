"""pods/proxy and services/proxy as upstream's proxy handler and transport, at the API server alone with a
real HTTP server standing in for the pod: every method upstream's proxy passes (HEAD authorized as get,
OPTIONS only by a `*` rule), the root redirect, X-Forwarded-Uri, CORS headers dropped, and HTML pages
(plain and gzip) and redirects to the backend with their absolute links rewritten through the proxy."""

from __future__ import annotations

import gzip
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import urllib3
from kubernetes import client

from pykubelet.rig.apiserver import ApiServer

pytestmark = pytest.mark.integration  # real servers, etcd or processes

PAGE = (
    "<!DOCTYPE html><html><head><link rel=stylesheet href=/style.css></head><body>\n"
    '<a href="/docs/">docs</a> <a href="relative/x">rel</a> <a href="https://example.com/x">away</a>\n'
    '<IMG SRC="http://{backend}/logo.png"> <form action="/submit?a=1&amp;b=2"></form>\n'
    '<p>caf\u00e9 &amp; <b>bold</b></p><!-- <a href="/comment"> --></body></html>\n'
)


def _host_ip() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))
            return s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address")


@pytest.fixture
def site() -> Iterator[tuple[str, int, list[dict]]]:
    seen: list[dict] = []

    class Site(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers)})
            backend = f"{self.server.server_address[0]}:{self.server.server_address[1]}"
            page = PAGE.format(backend=backend).encode("utf-8")
            headers = [("Access-Control-Allow-Origin", "*"), ("X-Site", "yes")]
            status = 200
            if self.path.startswith("/gz"):
                page = gzip.compress(page)
                headers += [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")]
            elif self.path.startswith("/redirect"):
                status, page = 302, b""
                headers.append(("Location", f"http://{backend}/login?next=%2F"))
            elif self.path.startswith("/elsewhere"):
                status, page = 302, b""
                headers.append(("Location", "https://example.com/login"))
            elif self.path.startswith("/data"):
                page = PAGE.encode()
                headers.append(("Content-Type", "text/plain"))
            else:
                headers.append(("Content-Type", "text/html; charset=utf-8"))
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(page)

        do_GET = do_HEAD = do_OPTIONS = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer((_host_ip(), 0), Site)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[0], httpd.server_address[1], seen
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def pod_base(v1: client.CoreV1Api, namespace: str, site) -> str:
    host, port, _ = site
    v1.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="site"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    v1.patch_namespaced_pod_status("site", namespace, {"status": {"podIP": host, "podIPs": [{"ip": host}]}})
    return f"/api/v1/namespaces/{namespace}/pods/site:{port}/proxy"


def _request(api: client.ApiClient, method: str, path: str, **kw) -> urllib3.BaseHTTPResponse:
    """The admin's request, redirects not followed (the client's pool carries its credentials)."""
    headers = dict(kw.pop("headers", {}))
    token = api.configuration.get_api_key_with_prefix("authorization")
    if token:
        headers["Authorization"] = token
    return api.rest_client.pool_manager.request(
        method, api.configuration.host + path, headers=headers, redirect=False, **kw
    )


def test_every_proxy_method_reaches_the_pod(api, pod_base, site) -> None:
    _, _, seen = site
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"):
        answer = _request(api, method, f"{pod_base}/data/x?q=1")
        assert answer.status == 200, (method, answer.status, answer.data)
        assert (seen[-1]["method"], seen[-1]["path"]) == (method, "/data/x?q=1")
        assert seen[-1]["headers"]["X-Forwarded-Uri"] == f"{pod_base}/data/x"
        assert "Authorization" not in seen[-1]["headers"]
        assert answer.headers["X-Site"] == "yes" and "Access-Control-Allow-Origin" not in answer.headers
    head = _request(api, "HEAD", f"{pod_base}/data/x")
    assert head.data == b"" and head.headers["Content-Length"] == str(len(PAGE.encode()))


def test_head_is_authorized_as_get_and_options_only_by_a_wildcard(
    apiserver: ApiServer, api, v1: client.CoreV1Api, namespace: str, pod_base, site
) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    for name, verbs in (("getter", ["get"]), ("everything", ["*"])):
        rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name=name),
                rules=[client.V1PolicyRule(api_groups=[""], resources=["pods/proxy"], verbs=verbs)],
            ),
        )
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=name),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
                subjects=[
                    client.RbacV1Subject(kind="User", name=name, api_group="rbac.authorization.k8s.io")
                ],
            ),
        )

    def as_user(user: str, method: str) -> int:
        return _request(api, method, f"{pod_base}/data/", headers={"Impersonate-User": user}).status

    assert as_user("getter", "HEAD") == 200 and as_user("getter", "GET") == 200
    assert as_user("getter", "OPTIONS") == 403 and as_user("getter", "POST") == 403
    assert as_user("everything", "OPTIONS") == 200
    assert as_user("nobody", "HEAD") == 403


def test_the_proxy_root_redirects_to_its_slash(api, pod_base, site) -> None:
    answer = _request(api, "GET", f"{pod_base}?x=1")
    assert answer.status == 301 and answer.headers["Location"] == f"{pod_base}/?x=1"
    assert _request(api, "GET", f"{pod_base}/").status == 200
    assert site[2][-1]["path"] == "/"


def _expected(prefix: str) -> str:
    return (
        f'<!DOCTYPE html><html><head><link rel="stylesheet" href="{prefix}/style.css"></head><body>\n'
        f'<a href="{prefix}/docs/">docs</a> <a href="relative/x">rel</a> <a href="https://example.com/x">away</a>\n'
        f'<img src="{prefix}/logo.png"> <form action="{prefix}/submit?a=1&amp;b=2"></form>\n'
        '<p>caf\u00e9 &amp; <b>bold</b></p><!-- <a href="/comment"> --></body></html>\n'
    )


def test_html_links_are_rewritten_through_the_proxy(api, pod_base, site) -> None:
    page = _request(api, "GET", f"{pod_base}/index.html")
    assert page.status == 200 and page.data.decode() == _expected(pod_base)
    assert page.headers["Content-Length"] == str(len(page.data))
    # gzip: decoded, rewritten, encoded again (the client asked for it, so it gets gzip back)
    zipped = _request(api, "GET", f"{pod_base}/gz", headers={"Accept-Encoding": "gzip"}, decode_content=False)
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(zipped.data).decode() == _expected(pod_base)
    # not HTML: byte for byte
    assert _request(api, "GET", f"{pod_base}/data").data == PAGE.encode()
    # a redirect to the backend itself goes through the proxy; one elsewhere is left alone
    moved = _request(api, "GET", f"{pod_base}/redirect")
    assert moved.status == 302 and moved.headers["Location"] == f"{pod_base}/login?next=%2F"
    assert _request(api, "GET", f"{pod_base}/elsewhere").headers["Location"] == "https://example.com/login"


def test_service_proxy_pages_link_through_the_service(
    apiserver: ApiServer, v1: client.CoreV1Api, namespace: str, site
) -> None:
    host, port, _ = site
    v1.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(name="http", port=80, target_port=port)]),
        ),
    )
    v1.create_namespaced_endpoints(
        namespace,
        client.V1Endpoints(
            metadata=client.V1ObjectMeta(name="web"),
            subsets=[
                client.V1EndpointSubset(
                    addresses=[client.V1EndpointAddress(ip=host)],
                    ports=[client.CoreV1EndpointPort(name="http", port=port)],
                )
            ],
        ),
    )
    prefix = f"/api/v1/namespaces/{namespace}/services/web:http/proxy"
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(apiserver.kubeconfig), "get", "--raw", f"{prefix}/sub/page.html"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == _expected(prefix), done
