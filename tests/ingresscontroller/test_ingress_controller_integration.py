"""`pykubelet ingress-controller` as a process against a real API server, on ingress-nginx's identity
and RBAC, with its real nginx, and no node: the backend is an HTTP server of the test's own on the
host's address, named by a hand-written EndpointSlice (so no pod is needed). Two replicas: both serve,
one holds the Lease and writes the status; each replica on a loopback address of its own (from a
network lease), as replicas on different nodes. Ingresses of another class are not touched; an Ingress
whose Service is missing gets a Warning event and is served once the Service exists; one turned bad
loses its address from the status. Then the Gateway API's CRDs installed while they run: routes served
on their listener's port with their statuses, a backend in another namespace refused until a
ReferenceGrant allows it, a listener on a port another process holds Accepted False PortUnavailable while
the others are served, then served once the port is free."""

from __future__ import annotations

import http.server
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.waiting import wait_for
from ingresscontroller import manifest
from kubeclient.hostaddr import default_route_ip
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.ingress import controller_argv
from pykubelet.rig.netlease import lease_network, loopback_for
from pykubelet.rig.process import Daemon, free_port
from tests.controlplane.test_apiserver_crd import raw

pytestmark = [pytest.mark.integration]

HOST = default_route_ip()
_REPO = Path(__file__).resolve().parents[2]
# The release's standard channel, as users install it; shared/ lies beside the clone or its parent folder.
CRDS = next(
    (
        p
        for d in (_REPO.parent, _REPO.parent.parent)
        if (p := d / "shared" / "gateway-api" / "v1.2.1" / "standard-install.yaml").exists()
    ),
    None,
)


class _Answer(http.server.BaseHTTPRequestHandler):
    label = "backend"

    def do_GET(self) -> None:
        body = f"{self.label} {self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(label: str) -> http.server.ThreadingHTTPServer:
    handler = type(f"Answer_{label}", (_Answer,), {"label": label})
    server = http.server.ThreadingHTTPServer((HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, int]]:
    """HTTP servers of the test's own on the host's address, answering `<label> <Host>`: label -> port."""
    servers = {label: _serve(label) for label in ("backend", "blue", "green")}
    yield {label: server.server_address[1] for label, server in servers.items()}
    for server in servers.values():
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def backend(backends: dict[str, int]) -> int:
    return backends["backend"]


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("ingress-api")) as server:
        yield server


@pytest.fixture(scope="module")
def api(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    with apiserver.api_client() as api:
        yield api


def _create(api: client.ApiClient, obj: dict) -> None:
    group_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"IngressClass": "ingressclasses", "Namespace": "namespaces"}.get(kind, kind.lower() + "s")
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    code, answer = raw(api, "POST", path, obj)
    assert code == 201, answer


@pytest.fixture(scope="module")
def controllers(
    apiserver: ApiServer, api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[str, int, int]]]:
    """Two replicas of the controller, each on its own address and ports; [(address, http, https)]."""
    for obj in [*manifest.rbac(), manifest.ingress_class(default=True)]:
        _create(api, obj)
    _create(api, manifest.ingress_class(default=False, name="other", controller="example.com/other"))
    root = tmp_path_factory.mktemp("ingress")
    kubeconfig = apiserver.client_kubeconfig(manifest.USER, manifest.GROUPS, root / "kubeconfig")
    daemons, replicas = [], []
    with lease_network("i") as net:
        try:
            for i in range(2):
                state = root / f"r{i}"
                (state / "nginx").mkdir(parents=True)
                address = loopback_for(net.pod_cidr, i + 1)
                assert address is not None
                pair = (free_port(address), free_port(address))
                argv = controller_argv(kubeconfig, state, address, pair)
                daemon = Daemon(f"ingress-{i}", argv, state / "log")
                daemon.start((state / "nginx" / "nginx.pid").exists, timeout=60, interval=0.2)
                daemons.append(daemon)
                replicas.append((address, *pair))
            yield replicas
        finally:
            for daemon in daemons:
                daemon.stop()


def _get(address: str, port: int, host: str) -> str:
    request = urllib.request.Request(f"http://{address}:{port}/", headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.read().decode()
    except urllib.error.HTTPError as err:
        return f"<{err.code}>"
    except OSError:
        return "<none>"


def _wait(fn: Any, what: str, timeout: float = 30.0) -> Any:
    return wait_for(fn, timeout=timeout, interval=0.2, what=what)


def _ingress(name: str, host: str, service: str, cls: str | None = None) -> dict:
    spec: dict = {
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {"service": {"name": service, "port": {"number": 80}}},
                        }
                    ]
                },
            }
        ]
    }
    if cls:
        spec["ingressClassName"] = cls
    return {"metadata": {"name": name}, "spec": spec}


def _service(
    v1: client.CoreV1Api, discovery: client.DiscoveryV1Api, namespace: str, name: str, port: int
) -> None:
    v1.create_namespaced_service(
        namespace,
        {"metadata": {"name": name}, "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}},
    )
    discovery.create_namespaced_endpoint_slice(
        namespace,
        {
            "metadata": {"name": f"{name}-1", "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [HOST], "conditions": {"ready": True}}],
        },
    )


def _status_ips(net: client.NetworkingV1Api, namespace: str, name: str) -> list[str]:
    lb = net.read_namespaced_ingress_status(name, namespace).status.load_balancer
    return [e.ip for e in (lb.ingress or [])] if lb else []


def test_both_replicas_serve_and_the_leader_writes_the_status(
    controllers, api, backend, tmp_path: Path
) -> None:
    v1, net, discovery = client.CoreV1Api(api), client.NetworkingV1Api(api), client.DiscoveryV1Api(api)
    namespace = "web"
    v1.create_namespace({"metadata": {"name": namespace}})
    _service(v1, discovery, namespace, "web", backend)
    made = net.create_namespaced_ingress(namespace, _ingress("web", "web.example", "web"))
    assert made.spec.ingress_class_name == "nginx"  # the default class, by admission
    net.create_namespaced_ingress(namespace, _ingress("theirs", "theirs.example", "web", cls="other"))
    for address, http_port, _ in controllers:
        _wait(
            lambda a=address, p=http_port: _get(a, p, "web.example") == "backend web.example",
            f"replica on {address}:{http_port} serving",
        )
    leaders = [[c[0]] for c in controllers]  # the Lease holder publishes its own address
    _wait(lambda: _status_ips(net, namespace, "web") in leaders, "the status written")
    entry = net.read_namespaced_ingress_status("web", namespace).status.load_balancer.ingress[0]
    assert any([entry.ip, *[p.port for p in entry.ports]] == list(c) for c in controllers), entry
    lease = client.CoordinationV1Api(api).read_namespaced_lease(manifest.LEASE, manifest.NAMESPACE)
    assert lease.spec.holder_identity
    assert _get(*controllers[0][:2], "theirs.example") == "<404>"  # another controller's class
    assert _status_ips(net, namespace, "theirs") == []

    # A missing Service: a Warning event, nothing served; the Service created: served.
    net.create_namespaced_ingress(namespace, _ingress("later", "later.example", "later"))
    events = _wait(
        lambda: [
            e
            for e in v1.list_namespaced_event(namespace).items
            if e.involved_object.name == "later" and e.type == "Warning"
        ],
        "a Warning event on the Ingress",
    )
    assert events[0].reason == "ServiceNotFound" and 'Service "web/later" not found' in events[0].message
    assert events[0].source.component == "nginx-ingress-controller"
    _service(v1, discovery, namespace, "later", backend)
    _wait(lambda: _get(*controllers[1][:2], "later.example") == "backend later.example", "later served")
    _wait(lambda: _status_ips(net, namespace, "later") in leaders, "its status written")

    # Its Service gone: served by an upstream without endpoints (503, as ingress-nginx), status kept.
    v1.delete_namespaced_service("later", namespace)
    _wait(lambda: _get(*controllers[0][:2], "later.example") == "<503>", "later.example answers 503")
    assert _status_ips(net, namespace, "later") in leaders
    assert _get(*controllers[0][:2], "web.example") == "backend web.example"


GATEWAY_OBJECTS = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pykubelet}
spec: {controllerName: pykubelet.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: someone-else}
spec: {controllerName: example.com/other}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: shop}
spec:
  gatewayClassName: pykubelet
  listeners:
  - {name: http, protocol: HTTP, port: LISTENER_PORT}
  - {name: tcp, protocol: TCP, port: 9000}
  - {name: held, protocol: HTTP, port: HELD_PORT}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: labelled, namespace: shop}
spec:
  gatewayClassName: pykubelet
  listeners:
  - name: http
    protocol: HTTP
    port: LISTENER_PORT
    allowedRoutes:
      namespaces:
        from: Selector
        selector: {matchLabels: {team: web}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: selected, namespace: web}
spec:
  parentRefs: [{name: labelled, namespace: shop}]
  hostnames: [selected.example]
  rules: [{backendRefs: [{name: web, port: 80}]}]
"""


def _http_route(name: str, host: str, *rules: dict) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"parentRefs": [{"name": "gw"}], "hostnames": [host], "rules": list(rules)},
    }


def _prefix(value: str) -> list[dict]:
    return [{"path": {"type": "PathPrefix", "value": value}}]


ROUTES = [
    _http_route(
        "split",
        "shop.example",
        {
            "matches": _prefix("/"),
            "backendRefs": [
                {"name": "blue", "port": 80, "weight": 90},
                {"name": "green", "port": 80, "weight": 10},
            ],
        },
        {
            "matches": [{"path": {"type": "Exact", "value": "/green"}}],
            "backendRefs": [{"name": "green", "port": 80}],
        },
    ),
    _http_route(
        "headers",
        "headers.example",
        {
            "matches": [{"headers": [{"name": "x-env", "value": "canary"}]}],
            "backendRefs": [{"name": "blue", "port": 80}],
        },
    ),
    _http_route(
        "extension",
        "extension.example",
        {
            "filters": [
                {
                    "type": "ExtensionRef",
                    "extensionRef": {"group": "example.com", "kind": "Cache", "name": "c"},
                }
            ],
            "backendRefs": [{"name": "blue", "port": 80}],
        },
    ),
    _http_route(
        "elsewhere", "elsewhere.example", {"backendRefs": [{"name": "web", "namespace": "web", "port": 80}]}
    ),
]


def _conditions(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj.get("conditions") or []}


def _read(api: client.ApiClient, path: str) -> dict:
    code, obj = raw(api, "GET", f"/apis/gateway.networking.k8s.io/v1/{path}")
    assert code == 200, obj
    return obj


def test_gateway_api_once_its_crds_are_installed(
    controllers, api, apiserver, backends, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The CRDs come after the controllers started (as on a cluster where they are installed later)."""
    kubectl = ["kubectl", "--kubeconfig", str(apiserver.kubeconfig)]
    if CRDS is None:
        pytest.skip("the Gateway API v1.2.1 CRDs are not beside the clone (shared/gateway-api)")
    crds = str(CRDS)
    subprocess.run(
        [*kubectl, "apply", "--server-side", "-f", crds], check=True, capture_output=True, timeout=120
    )
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
        timeout=90,
    )
    # The controllers made their GatewayClass once its CRD appeared, and never asked for a kind before.
    _wait(
        lambda: raw(api, "GET", "/apis/gateway.networking.k8s.io/v1/gatewayclasses/pykubelet")[0] == 200,
        "the GatewayClass made by the controller",
    )
    made = _read(api, "gatewayclasses/pykubelet")
    assert made["spec"]["controllerName"] == "pykubelet.io/gateway-controller"
    logs = [p.read_text() for p in tmp_path_factory.getbasetemp().glob("ingress[0-9]*/r*/log")]
    assert len(logs) == 2 and not any("watch failed" in log for log in logs), logs
    v1, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    v1.create_namespace({"metadata": {"name": "shop"}})
    _service(v1, discovery, "shop", "blue", backends["blue"])
    _service(v1, discovery, "shop", "green", backends["green"])
    # The listener `held` names a port another process holds on both replicas' addresses.
    address, listener_port = controllers[0][0], free_port(controllers[0][0])
    holders = [socket.socket() for _ in controllers]
    for holder, (replica, _, _) in zip(holders, controllers, strict=True):
        holder.bind((replica, holders[0].getsockname()[1] if holder is not holders[0] else 0))
        holder.listen()
    held_port = holders[0].getsockname()[1]
    objects = GATEWAY_OBJECTS.replace("LISTENER_PORT", str(listener_port)).replace(
        "HELD_PORT", str(held_port)
    )
    subprocess.run(
        [*kubectl, "apply", "-f", "-"],
        input=objects + "---\n" + yaml.safe_dump_all(ROUTES),
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )

    http_port = listener_port
    _wait(
        lambda: _get(address, http_port, "shop.example").startswith(("blue", "green")),
        "shop.example served on its listener's port",
        timeout=90,
    )
    assert _get(address, controllers[0][1], "shop.example") == "<404>"  # not on the Ingress port

    def statuses_written() -> bool:
        route = _read(api, "namespaces/shop/httproutes/elsewhere")
        return bool((route.get("status") or {}).get("parents"))

    _wait(statuses_written, "the routes' status")
    # Every object taken in: 20 answers in a row from the routes (while a reload goes on, a worker of an
    # earlier configuration may still answer 404).
    _wait(
        lambda: all(
            _get(address, http_port, "shop.example").startswith(("blue", "green")) for _ in range(20)
        ),
        "stable",
    )

    # Weighted backends: nginx's smooth weighted round robin gives the 90/10 split over 200 requests.
    answers = [_get(address, http_port, "shop.example").split()[0] for _ in range(200)]
    assert 170 <= answers.count("blue") <= 190 and answers.count("blue") + answers.count("green") == 200, (
        answers
    )
    request = urllib.request.Request(f"http://{address}:{http_port}/green", headers={"Host": "shop.example"})
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.read().decode() == "green shop.example"  # the Exact rule
    request = urllib.request.Request(
        f"http://{address}:{http_port}/", headers={"Host": "headers.example", "X-Env": "canary"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.read().decode() == "blue headers.example"  # the header match met
    assert _get(address, http_port, "headers.example") == "<404>"  # ... and not met: no rule matches
    assert (
        _get(address, http_port, "extension.example") == "<404>"
    )  # a filter not supported: refused, not served
    assert _get(address, http_port, "elsewhere.example") == "<500>"  # its only backend refused: 500

    assert _conditions(_read(api, "gatewayclasses/pykubelet")["status"])["Accepted"] == ("True", "Accepted")
    assert (
        "conditions" not in (_read(api, "gatewayclasses/someone-else").get("status") or {})
        or _conditions(_read(api, "gatewayclasses/someone-else")["status"]).get("Accepted", ("Unknown", ""))[
            0
        ]
        == "Unknown"
    )  # another controller's class is not ours to accept
    gw = _read(api, "namespaces/shop/gateways/gw")["status"]
    assert _conditions(gw)["Programmed"] == ("True", "Programmed")
    assert gw["addresses"] in [[{"type": "IPAddress", "value": c[0]}] for c in controllers]
    listeners = {entry["name"]: entry for entry in gw["listeners"]}
    assert listeners["http"]["attachedRoutes"] == 3  # split, headers and elsewhere; extension is not accepted
    assert _conditions(listeners["http"])["Accepted"] == ("True", "Accepted")
    assert _conditions(listeners["tcp"])["Accepted"] == ("False", "UnsupportedProtocol")
    # The held port: PortUnavailable, not programmed, its routes not attached; the others served all along.
    assert _conditions(listeners["held"])["Accepted"] == ("False", "PortUnavailable")
    assert _conditions(listeners["held"])["Programmed"] == ("False", "Invalid")
    assert (
        listeners["held"]["attachedRoutes"] == 0 and "in use" in listeners["held"]["conditions"][0]["message"]
    )
    split = _read(api, "namespaces/shop/httproutes/split")["status"]["parents"][0]
    assert split["controllerName"] == "pykubelet.io/gateway-controller"
    assert _conditions(split) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    headers = _read(api, "namespaces/shop/httproutes/headers")["status"]["parents"][0]
    assert _conditions(headers)["Accepted"] == ("True", "Accepted")
    extension = _read(api, "namespaces/shop/httproutes/extension")["status"]["parents"][0]
    assert _conditions(extension)["Accepted"] == ("False", "UnsupportedValue")

    # allowedRoutes from a Selector: the web namespace lacks the label, so its route is not admitted ...
    def selected(reason: str) -> bool:
        parents = (_read(api, "namespaces/web/httproutes/selected").get("status") or {}).get("parents")
        return bool(parents) and _conditions(parents[0])["Accepted"][1] == reason

    _wait(lambda: selected("NotAllowedByListeners"), "the selected route refused")
    assert _get(address, http_port, "selected.example") == "<404>"
    v1.patch_namespace("web", {"metadata": {"labels": {"team": "web"}}})  # ... until it has it
    _wait(lambda: _get(address, http_port, "selected.example") == "backend selected.example", "served")
    _wait(lambda: selected("Accepted"), "the selected route Accepted")
    elsewhere = _read(api, "namespaces/shop/httproutes/elsewhere")["status"]["parents"][0]
    assert _conditions(elsewhere)["ResolvedRefs"] == ("False", "RefNotPermitted")

    # A ReferenceGrant in web for shop's HTTPRoutes: the refused backend is now resolved and served.
    grant = {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": "shop-routes", "namespace": "web"},
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "shop"}],
            "to": [{"group": "", "kind": "Service", "name": "web"}],
        },
    }
    code, answer = raw(
        api, "POST", "/apis/gateway.networking.k8s.io/v1beta1/namespaces/web/referencegrants", grant
    )
    assert code == 201, answer
    _wait(
        lambda: _get(address, http_port, "elsewhere.example") == "backend elsewhere.example",
        "elsewhere.example served",
    )

    def resolved() -> bool:
        parent = _read(api, "namespaces/shop/httproutes/elsewhere")["status"]["parents"][0]
        return _conditions(parent)["ResolvedRefs"] == ("True", "ResolvedRefs")

    _wait(resolved, "elsewhere's ResolvedRefs True")

    # The port freed: the controllers find it again (checked every few seconds) and serve the listener.
    for holder in holders:
        holder.close()

    def held_accepted() -> bool:
        status = _read(api, "namespaces/shop/gateways/gw")["status"]
        held = next(e for e in status["listeners"] if e["name"] == "held")
        return _conditions(held)["Accepted"] == ("True", "Accepted") and held["attachedRoutes"] == 3

    _wait(held_accepted, "the freed port's listener Accepted", timeout=60)
    _wait(lambda: _get(address, held_port, "shop.example").startswith(("blue", "green")), "served on it")
