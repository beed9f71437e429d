"""HTTPRoute matches and filters through the real nginx: the configuration `gateway.build` and `render`
make from the objects, served by the controller's `Nginx`, in front of an echo backend of the test's own
(it answers the method, the URI and the headers it received). Cases and expectations follow the Gateway
API v1.2.1 conformance tests (httproute-header-matching, -query-param-matching, -method-matching,
-matching-across-routes, -request-header-modifier, -response-header-modifier, -rewrite-path,
-redirect-*): precedence across rules and routes, header/query/method conditions, header set/add/remove
on the request and the response, URL rewrites and redirects; an HTTPS listener terminating TLS with its
Secret's certificate, chosen by SNI, its routes not served on the HTTP port."""

from __future__ import annotations

import asyncio
import base64
import http.client
import http.server
import json
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from e2e.waiting import wait_for
from ingresscontroller import gateway, model
from ingresscontroller.listenerports import Ports
from ingresscontroller.nginx import Nginx
from ingresscontroller.nginxconf import Files, Listen, render
from kubeclient.serving import ensure_self_signed
from pykubelet.rig.process import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed"),
]

CONTROLLER = "pykubelet.io/gateway-controller"


class _Echo(http.server.BaseHTTPRequestHandler):
    label = "echo"
    seen: list[str] = []  # the URIs received (each backend its own list)

    def _answer(self) -> None:
        self.seen.append(f"{self.path} {self.headers.get('X-Header-Set', '')}".strip())
        body = json.dumps(
            {
                "backend": self.label,
                "method": self.command,
                "uri": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Backend-Header", "from-backend")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def echoes() -> Iterator[dict[str, int]]:
    servers = {}
    for label in ("v1", "v2", "v3"):
        handler = type(f"Echo_{label}", (_Echo,), {"label": label, "seen": []})
        servers[label] = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=servers[label].serve_forever, daemon=True).start()
    _Echo.backends = {label: server.RequestHandlerClass for label, server in servers.items()}  # type: ignore[attr-defined]
    yield {label: server.server_address[1] for label, server in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


def _cluster(ports: dict[str, int], secrets: dict[str, dict]) -> model.Cluster:
    services, slices = {}, {}
    for label, port in ports.items():
        services[f"gw/{label}"] = {"metadata": {"name": label}, "spec": {"ports": [{"port": 8080}]}}
        slices[f"gw/{label}"] = [
            {
                "addressType": "IPv4",
                "ports": [{"name": "", "port": port}],
                "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
            }
        ]
    return model.Cluster(services, slices, secrets)


def _route(name: str, created: str, host: str, *rules: dict) -> dict:
    return {
        "metadata": {"name": name, "namespace": "gw", "generation": 1, "creationTimestamp": created},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host], "rules": list(rules)},
    }


def _to(backend: str, *filters: dict, **match: Any) -> dict:
    rule: dict[str, Any] = {"backendRefs": [{"name": backend, "port": 8080}]}
    if match:
        rule["matches"] = [match]
    if filters:
        rule["filters"] = list(filters)
    return rule


def _prefix(value: str) -> dict:
    return {"type": "PathPrefix", "value": value}


def _headers(**values: str) -> list[dict]:
    return [{"name": k.replace("_", "-"), "value": v} for k, v in values.items()]


ROUTES = [
    # httproute-header-matching and -matching-across-routes: more header matches win, then older routes.
    _route(
        "matching",
        "2026-01-01T00:00:00Z",
        "match.example",
        _to("v1", path=_prefix("/"), headers=_headers(version="one")),
        _to("v2", path=_prefix("/"), headers=_headers(version="two")),
        _to("v1", path=_prefix("/"), headers=_headers(version="two", color="orange")),
        _to(
            "v3",
            path=_prefix("/"),
            headers=[{"name": "x-re", "type": "RegularExpression", "value": "^ab+c$"}],
        ),
        _to("v2", path={"type": "Exact", "value": "/exact"}),
        _to("v3", path=_prefix("/prefix")),
        _to("v1", path=_prefix("/prefix/deeper"), method="POST"),
        _to("v2", path=_prefix("/q"), queryParams=[{"name": "animal", "value": "whale"}]),
        _to(
            "v3",
            path=_prefix("/q"),
            queryParams=[{"name": "animal", "value": "whale"}, {"name": "x", "value": "1"}],
        ),
        _to(
            "v1",
            path=_prefix("/qre"),
            queryParams=[{"name": "animal", "type": "RegularExpression", "value": "^d[a-z]g$"}],
        ),
    ),
    _route(
        "younger",
        "2026-02-01T00:00:00Z",
        "match.example",
        _to("v3", path=_prefix("/"), headers=_headers(version="one")),
    ),
    _route(
        "filters",
        "2026-01-01T00:00:00Z",
        "filters.example",
        _to(
            "v1",
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {
                    "set": [{"name": "X-Header-Set", "value": "set-overwrites-values"}],
                    "add": [{"name": "X-Header-Add", "value": "add-appends-values"}],
                    "remove": ["X-Header-Remove"],
                },
            },
            path=_prefix("/request"),
        ),
        _to(
            "v1",
            {
                "type": "ResponseHeaderModifier",
                "responseHeaderModifier": {
                    "set": [{"name": "X-Backend-Header", "value": 'set $dollar "quoted"'}],
                    "add": [{"name": "X-Added", "value": "added"}],
                },
            },
            path=_prefix("/response"),
        ),
        _to(
            "v2",
            {
                "type": "URLRewrite",
                "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/one"}},
            },
            path=_prefix("/prefix/one"),
        ),
        _to(
            "v2",
            {
                "type": "URLRewrite",
                "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}},
            },
            path=_prefix("/strip-prefix"),
        ),
        _to(
            "v2",
            {
                "type": "URLRewrite",
                "urlRewrite": {
                    "hostname": "rewritten.example",
                    "path": {"type": "ReplaceFullPath", "replaceFullPath": "/one"},
                },
            },
            path=_prefix("/full/one"),
        ),
        {
            "matches": [{"path": _prefix("/redirect")}],
            "filters": [
                {
                    "type": "RequestRedirect",
                    "requestRedirect": {
                        "scheme": "https",
                        "hostname": "example.org",
                        "statusCode": 301,
                        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/moved"},
                    },
                }
            ],
        },
        {
            "matches": [{"path": _prefix("/port")}],
            "filters": [
                {"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org", "port": 8083}}
            ],
        },
        {
            "matches": [{"path": _prefix("/same-port")}],
            "filters": [{"type": "RequestRedirect", "requestRedirect": {"hostname": "example.org"}}],
        },
    ),
    _route(
        "regex",
        "2026-01-01T00:00:00Z",
        "regex.example",
        _to("v1", path=_prefix("/")),
        _to("v2", path={"type": "RegularExpression", "value": "/v[0-9]+/.*"}),
        _to("v3", path=_prefix("/v1")),
    ),
    _route(
        "mirror",
        "2026-01-01T00:00:00Z",
        "mirror.example",
        _to(
            "v1",
            {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "v2", "port": 8080}}},
            {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "v3", "port": 8080}}},
            path=_prefix("/mirrored"),
        ),
        _to(  # httproute-request-multiple-mirrors' second rule: the copies carry the modified headers
            "v1",
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {"set": [_headers(x_header_set="m")[0]]},
            },
            {"type": "RequestMirror", "requestMirror": {"backendRef": {"name": "v2", "port": 8080}}},
            path=_prefix("/mirror-and-modify"),
        ),
    ),
    {
        **_route("other", "2026-01-01T00:00:00Z", "other.example", _to("v2")),
        "spec": {
            "parentRefs": [{"name": "gw", "sectionName": "https"}],
            "hostnames": ["other.example"],
            "rules": [_to("v2")],
        },
    },
    {
        **_route("secure", "2026-01-01T00:00:00Z", "secure.example", _to("v3")),
        "spec": {
            "parentRefs": [{"name": "gw", "sectionName": "https"}],
            "hostnames": ["secure.example"],
            "rules": [_to("v3")],
        },
    },
]


@pytest.fixture(scope="module")
def served(echoes: dict[str, int], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Listen]:
    """The real nginx serving ROUTES; the ports of its HTTP and HTTPS listeners (each served on the port
    it names, not on the controller's Ingress ports)."""
    root = tmp_path_factory.mktemp("gateway-nginx")
    for sub in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (root / "tmp" / sub).mkdir(parents=True, exist_ok=True)
    cert, key = ensure_self_signed(root / "certs", "ingress.local", [], "default-fake")
    files, listen = Files(root, cert, key), Listen("127.0.0.1", free_port(), free_port())
    listeners = Listen("127.0.0.1", free_port(), free_port())
    secrets = {}
    for name in ("secure", "other"):
        site_cert, site_key = ensure_self_signed(root / "site", f"{name}.example", [], name)
        secrets[f"gw/{name}"] = {
            "metadata": {"name": name, "namespace": "gw"},
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": base64.b64encode(site_cert.read_bytes()).decode(),
                "tls.key": base64.b64encode(site_key.read_bytes()).decode(),
            },
        }
    https = {  # two certificateRefs: SNI gets the one made for the name asked
        "name": "https",
        "protocol": "HTTPS",
        "port": listeners.https_port,
        "tls": {"certificateRefs": [{"name": "secure"}, {"name": "other"}]},
    }
    gateways = [
        {
            "metadata": {"name": "gw", "namespace": "gw", "generation": 1},
            "spec": {
                "gatewayClassName": "ours",
                "listeners": [{"name": "http", "protocol": "HTTP", "port": listeners.http_port}, https],
            },
        }
    ]
    classes = [{"metadata": {"name": "ours"}, "spec": {"controllerName": CONTROLLER}}]
    config = model.Config()
    cluster = _cluster(echoes, secrets)
    ports = Ports(listen.http_port, listen.https_port)
    statuses = gateway.build(config, classes, gateways, ROUTES, cluster, CONTROLLER, "127.0.0.1", ports=ports)
    assert all(
        c["status"] == "True" for s in statuses.routes.values() for p in s["parents"] for c in p["conditions"]
    ), statuses.routes
    for certificate in config.certificates.values():  # as the controller writes them
        files.cert(certificate.name).write_bytes(certificate.cert)
        files.key(certificate.name).write_bytes(certificate.key)
    nginx = Nginx(root)
    with asyncio.Runner() as runner:  # one loop owns the nginx child from start to stop
        runner.run(nginx.apply(render(config, listen, files)))
        try:
            yield listeners
        finally:
            runner.run(nginx.stop())


@pytest.fixture(scope="module")
def proxy(served: Listen) -> int:
    return served.http_port


def _call(port: int, host: str, path: str, method: str = "GET", **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path, headers={"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}})
    answer = conn.getresponse()
    answer.read_body = answer.read()  # type: ignore[attr-defined]
    conn.close()
    return answer


def _echo(port: int, host: str, path: str, method: str = "GET", **headers: str) -> dict:
    answer = _call(port, host, path, method, **headers)
    assert answer.status == 200, (path, answer.status, answer.read_body)  # type: ignore[attr-defined]
    return json.loads(answer.read_body)  # type: ignore[attr-defined]


def _backend(port: int, path: str, method: str = "GET", **headers: str) -> str:
    return _echo(port, "match.example", path, method, **headers)["backend"]


def test_header_matches_by_count_then_route_age(proxy: int) -> None:
    assert _backend(proxy, "/", version="one") == "v1"  # the older route wins the tie with "younger"
    assert _backend(proxy, "/", version="two") == "v2"
    assert _backend(proxy, "/", version="two", color="orange") == "v1"  # two header matches beat one
    assert _backend(proxy, "/", version="two", color="blue") == "v2"
    assert _backend(proxy, "/", x_re="abbbc") == "v3"  # RegularExpression
    assert _call(proxy, "match.example", "/", x_re="abd").status == 404
    assert _call(proxy, "match.example", "/").status == 404  # no rule matches a request without headers


def test_path_precedence_then_method_and_query(proxy: int) -> None:
    assert _backend(proxy, "/exact", version="one") == "v2"  # Exact beats any prefix's header match
    assert _backend(proxy, "/exact/not", version="one") == "v1"
    assert _backend(proxy, "/prefix/deeper", "POST") == "v1"  # the longer prefix, its method met
    assert _backend(proxy, "/prefix/deeper") == "v3"  # method not met: the shorter prefix takes it
    assert _backend(proxy, "/prefixes", version="two") == "v2"  # /prefix matches by path elements only
    assert _backend(proxy, "/q?animal=whale") == "v2"
    assert _backend(proxy, "/q?x=1&animal=whale") == "v3"  # more query matches win
    assert _backend(proxy, "/q?animal=whalebone", version="one") == "v1"  # exact value only
    assert _backend(proxy, "/qre?animal=dog") == "v1"
    assert _backend(proxy, "/qre?animal=dingo", version="two") == "v2"


def test_request_and_response_header_filters(proxy: int) -> None:
    seen = _echo(proxy, "filters.example", "/request", x_header_set="other", x_header_remove="gone")[
        "headers"
    ]
    assert seen["x-header-set"] == "set-overwrites-values" and "x-header-remove" not in seen
    assert seen["x-header-add"] == "add-appends-values" and seen["host"] == "filters.example"
    seen = _echo(proxy, "filters.example", "/request", x_header_add="some-other-value")["headers"]
    assert seen["x-header-add"] == "some-other-value,add-appends-values"
    answer = _call(proxy, "filters.example", "/response")
    assert answer.status == 200 and answer.getheader("X-Backend-Header") == 'set $dollar "quoted"'
    assert answer.getheader("X-Added") == "added"


def test_url_rewrites(proxy: int) -> None:
    assert _echo(proxy, "filters.example", "/prefix/one/two?a=b")["uri"] == "/one/two?a=b"
    assert _echo(proxy, "filters.example", "/prefix/one")["uri"] == "/one"
    assert _echo(proxy, "filters.example", "/strip-prefix/three")["uri"] == "/three"
    assert _echo(proxy, "filters.example", "/strip-prefix")["uri"] == "/"
    full = _echo(proxy, "filters.example", "/full/one/two")
    assert full["uri"] == "/one" and full["headers"]["host"] == "rewritten.example"


def test_redirects(proxy: int) -> None:
    answer = _call(proxy, "filters.example", "/redirect/a?x=1")
    assert (answer.status, answer.getheader("Location")) == (301, "https://example.org/moved/a?x=1")
    answer = _call(proxy, "filters.example", "/port")
    assert (answer.status, answer.getheader("Location")) == (302, "http://example.org:8083/port")
    answer = _call(proxy, "filters.example", "/same-port/x")
    assert (answer.status, answer.getheader("Location")) == (302, f"http://example.org:{proxy}/same-port/x")


def _subject(port: int, host: str) -> str:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname=host
    ) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def test_an_https_listener_terminates_tls_with_its_secrets_certificate(served: Listen) -> None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("secure.example", served.https_port, timeout=5, context=context)
    conn.sock = context.wrap_socket(
        socket.create_connection(("127.0.0.1", served.https_port), timeout=5),
        server_hostname="secure.example",
    )
    try:
        der = conn.sock.getpeercert(binary_form=True)
        conn.request("GET", "/", headers={"Host": "secure.example"})
        answer = conn.getresponse()
        body = json.loads(answer.read())
    finally:
        conn.close()
    assert x509.load_der_x509_certificate(der).subject.rfc4514_string().startswith("CN=secure.example@")
    assert body["backend"] == "v3"
    assert _call(served.http_port, "secure.example", "/").status == 404  # not the HTTP listener's route
    # A host no listener serves over HTTPS gets the controller's default certificate (ingress-nginx's fake).
    assert _subject(served.https_port, "nobody.example").startswith("CN=ingress.local@")
    assert _subject(served.https_port, "secure.example").startswith("CN=secure.example@")


def test_a_regular_expression_path_matches_the_whole_path(proxy: int) -> None:
    assert _echo(proxy, "regex.example", "/v2/x")["backend"] == "v2"
    assert _echo(proxy, "regex.example", "/v10/a/b")["backend"] == "v2"
    assert _echo(proxy, "regex.example", "/v1/x")["backend"] == "v3"  # the longer prefix ranks first
    assert _echo(proxy, "regex.example", "/v22")["backend"] == "v1"  # the whole path must match
    assert _echo(proxy, "regex.example", "/other")["backend"] == "v1"


def test_request_mirror_copies_each_request_to_its_backends(proxy: int) -> None:
    """httproute-request-mirror / -multiple-mirrors: the client gets the backend's answer, each mirror
    a copy of the request (its answer dropped)."""
    assert _echo(proxy, "mirror.example", "/mirrored/one?x=1")["backend"] == "v1"
    backends = _Echo.backends  # type: ignore[attr-defined]
    wait_for(
        lambda: all("/mirrored/one?x=1" in backends[label].seen for label in ("v2", "v3")),
        timeout=10,
        interval=0.05,
        what=f"the mirrors' copies; seen { ({k: b.seen[-3:] for k, b in backends.items()}) }",
    )
    assert "/mirrored/one?x=1" in backends["v1"].seen
    assert _echo(proxy, "mirror.example", "/mirror-and-modify/a")["headers"]["x-header-set"] == "m"
    wait_for(
        lambda: "/mirror-and-modify/a m" in backends["v2"].seen,
        timeout=10,
        interval=0.05,
        what="the modified mirror copy at v2",
    )


def test_a_listener_with_two_certificates_answers_each_name_with_its_own(served: Listen) -> None:
    assert _subject(served.https_port, "other.example").startswith("CN=other.example@")
    assert _subject(served.https_port, "secure.example").startswith("CN=secure.example@")
