"""`pykubelet ingress-controller` as a process against a real API server, on ingress-nginx's identity
and RBAC, with its real nginx, and no node: the backend is an HTTP server of the test's own on the
host's address, named by a hand-written EndpointSlice (so no pod is needed). Two replicas: both serve,
one holds the Lease and writes the status; each replica on a loopback address of its own (from a
network lease), as replicas on different nodes. Ingresses of another class are not touched; an Ingress
whose Service is missing gets a Warning event and is served once the Service exists; one turned bad
loses its address from the status. Then the Gateway API's CRDs installed while they run: routes served
on their listener's port with their statuses, a backend in another namespace refused until a
ReferenceGrant allows it, a listener with the port and hostname of an older Gateway's Conflicted
HostnameConflict while its Gateway's distinct one serves (one Gateway's twin listeners refused by the
CRD's CEL rule), a listener on a port another process holds Accepted False PortUnavailable while the
others are served, then served once the port is free. Last, a controller in the test's process whose bind
check is told a port the test holds is free: nginx's reload names the port, that listener alone is left
out (PortUnavailable) and the rest applied at once, and it is served once the port is freed."""

from __future__ import annotations

import asyncio
import http.server
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e.waiting import wait_for
from ingresscontroller import manifest
from ingresscontroller.controller import ControllerConfig, IngressController
from ingresscontroller.nginxconf import Listen
from ingresscontroller.portcheck import held_elsewhere
from kubeclient.client import KubeClient
from kubeclient.config import load_kubeconfig
from kubeclient.hostaddr import default_route_ip
from kubeclient.leaderelection import LeaderElection
from pykubelet.rig.apiserver import ApiServer
from pykubelet.rig.ingress import controller_argv
from pykubelet.rig.netlease import NetworkLease, lease_network, loopback_for
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
    plural = {"IngressClass": "ingressclasses", "GatewayClass": "gatewayclasses"}.get(
        kind, kind.lower() + "s"
    )
    base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    code, answer = raw(api, "POST", path, obj)
    assert code == 201, answer


@pytest.fixture(scope="module")
def net() -> Iterator[NetworkLease]:
    """The network lease whose loopback addresses the controllers listen on (127.200.N.x)."""
    with lease_network("i") as lease:
        yield lease


@pytest.fixture(scope="module")
def controllers(
    apiserver: ApiServer, api: client.ApiClient, net: NetworkLease, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[tuple[str, int, int]]]:
    """Two replicas of the controller, each on its own address and ports; [(address, http, https)]."""
    for obj in [*manifest.rbac(), manifest.ingress_class(default=True)]:
        _create(api, obj)
    _create(api, manifest.ingress_class(default=False, name="other", controller="example.com/other"))
    root = tmp_path_factory.mktemp("ingress")
    kubeconfig = apiserver.client_kubeconfig(manifest.USER, manifest.GROUPS, root / "kubeconfig")
    daemons, replicas = [], []
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
    hostname: selected.example
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
---
# Its listener `http` has gw's port, protocol and no hostname: gw, older (or as old and first by name),
# keeps them; `spare` is distinct (its hostname) and serves.
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: late, namespace: shop}
spec:
  gatewayClassName: pykubelet
  listeners:
  - {name: http, protocol: HTTP, port: LISTENER_PORT}
  - {name: spare, protocol: HTTP, port: LISTENER_PORT, hostname: late.example}
"""


def _http_route(
    name: str, host: str, *rules: dict, parent: dict | None = None, namespace: str = "shop"
) -> dict:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parentRefs": [parent or {"name": "gw"}], "hostnames": [host], "rules": list(rules)},
    }


TO_BLUE = {"backendRefs": [{"name": "blue", "port": 80}]}


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
    # To Gateway late: through its listeners that serve (spare), and through its conflicted one alone.
    _http_route("late", "late.example", TO_BLUE, parent={"name": "late"}),
    _http_route("lost", "lost.example", TO_BLUE, parent={"name": "late", "sectionName": "http"}),
]


def _conditions(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj.get("conditions") or []}


def _read(api: client.ApiClient, path: str) -> dict:
    code, obj = raw(api, "GET", f"/apis/gateway.networking.k8s.io/v1/{path}")
    assert code == 200, obj
    return obj


def _install_crds(apiserver: ApiServer) -> None:
    """The Gateway API's standard channel, applied as users install it (again: nothing changes)."""
    if CRDS is None:
        pytest.skip("the Gateway API v1.2.1 CRDs are not beside the clone (shared/gateway-api)")
    kubectl = ["kubectl", "--kubeconfig", str(apiserver.kubeconfig)]
    subprocess.run(
        [*kubectl, "apply", "--server-side", "-f", str(CRDS)], check=True, capture_output=True, timeout=120
    )
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
        check=True,
        capture_output=True,
        timeout=90,
    )


def test_gateway_api_once_its_crds_are_installed(
    controllers, api, apiserver, backends, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The CRDs come after the controllers started (as on a cluster where they are installed later)."""
    kubectl = ["kubectl", "--kubeconfig", str(apiserver.kubeconfig)]
    _install_crds(apiserver)
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
    # Gateway late's `http` is not distinct from gw's (port, protocol, no hostname): Conflicted, not
    # accepted, no route; its `spare` serves late.example; the route to `http` alone is not accepted.
    late = _wait(
        lambda: (
            (status := _read(api, "namespaces/shop/gateways/late").get("status") or {}).get("listeners")
            and status
        ),
        "Gateway late's status",
    )
    late_listeners = {entry["name"]: entry for entry in late["listeners"]}
    assert _conditions(late_listeners["http"]) == {
        "Accepted": ("False", "PortUnavailable"),
        "Programmed": ("False", "Invalid"),
        "ResolvedRefs": ("True", "ResolvedRefs"),
        "Conflicted": ("True", "HostnameConflict"),
    }
    assert "listener http of Gateway shop/gw" in late_listeners["http"]["conditions"][0]["message"]
    assert late_listeners["http"]["attachedRoutes"] == 0 and late_listeners["spare"]["attachedRoutes"] == 1
    assert _conditions(late_listeners["spare"])["Conflicted"] == ("False", "NoConflicts")
    assert _conditions(late) == {
        "Accepted": ("True", "ListenersNotValid"),
        "Programmed": ("True", "Programmed"),
    }
    assert _get(address, http_port, "late.example") == "blue late.example"
    assert _get(address, http_port, "lost.example") == "<404>"
    lost = _read(api, "namespaces/shop/httproutes/lost")["status"]["parents"][0]
    assert _conditions(lost)["Accepted"][0] == "False"
    # Within one Gateway the CRD's CEL rule refuses such twins before any controller sees them.
    twins = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": {"name": "twins"},
        "spec": {
            "gatewayClassName": "pykubelet",
            "listeners": [{"name": n, "protocol": "HTTP", "port": listener_port} for n in ("a", "b")],
        },
    }
    code, refused = raw(api, "POST", "/apis/gateway.networking.k8s.io/v1/namespaces/shop/gateways", twins)
    assert code == 422, refused
    assert "Combination of port, protocol and hostname must be unique for each listener" in refused["message"]

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


RACE_CONTROLLER = "pykubelet.io/race-gateway-controller"


def _race_objects(port: int) -> list[dict]:
    """A GatewayClass of the in-process controller's own (the replicas leave it alone), its Gateway with
    one listener and a route on it."""
    group = "gateway.networking.k8s.io/v1"
    return [
        {
            "apiVersion": group,
            "kind": "GatewayClass",
            "metadata": {"name": "race"},
            "spec": {"controllerName": RACE_CONTROLLER},
        },
        {
            "apiVersion": group,
            "kind": "Gateway",
            "metadata": {"name": "race", "namespace": "race"},
            "spec": {
                "gatewayClassName": "race",
                "listeners": [{"name": "steady", "protocol": "HTTP", "port": port}],
            },
        },
        _http_route("first", "first.example", TO_BLUE, parent={"name": "race"}, namespace="race"),
    ]


def _listener_conditions(api: client.ApiClient, name: str) -> dict[str, tuple[str, str]]:
    status = _read(api, "namespaces/race/gateways/race").get("status") or {}
    found = next((e for e in status.get("listeners") or [] if e["name"] == name), None)
    return _conditions(found) if found else {}


async def test_a_listener_port_taken_between_the_check_and_the_reload(
    controllers, api, apiserver, backends, net: NetworkLease, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The controller in this process, on a loopback address of its own, its bind check told that a port
    the test holds is free (as when another process takes it right after the check): nginx's reload
    fails on that port, the listener is Accepted False PortUnavailable naming nginx's complaint, and the
    configuration without it is applied at once (the other listener serves on, a route added meanwhile
    is served); checked again every 10 s, it is served once the port is freed."""
    await asyncio.to_thread(_install_crds, apiserver)
    address = loopback_for(net.pod_cidr, 3)
    assert address is not None
    steady, raced = free_port(address), free_port(address)
    holder = socket.socket()
    holder.bind((address, raced))
    holder.listen()

    def told_free(where: str, ports: Iterable[int]) -> dict[int, str]:
        found = held_elsewhere(where, ports)
        if holder.fileno() != -1:  # held by the test: the check is told it is free
            found.pop(raced, None)
        return found

    v1, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    v1.create_namespace({"metadata": {"name": "race"}})
    _service(v1, discovery, "race", "blue", backends["blue"])
    for obj in _race_objects(steady):
        _create(api, obj)
    root = tmp_path_factory.mktemp("race")
    (root / "nginx").mkdir()
    kubeconfig = apiserver.client_kubeconfig(manifest.USER, manifest.GROUPS, root / "kubeconfig")
    kube = KubeClient(load_kubeconfig(kubeconfig), component="ingress-race-test")
    config = ControllerConfig(
        controller_name="example.com/no-ingress-class",
        state_dir=root / "nginx",
        listen=Listen(address, free_port(address), free_port(address)),
        publish_address=address,
        election=LeaderElection("unused", enabled=False),
        gateway_controller=RACE_CONTROLLER,
    )
    controller = IngressController(kube, config)
    controller.check_ports = told_free
    stop = asyncio.Event()
    running = asyncio.create_task(controller.run(stop))

    async def until(check: Any, what: str, timeout: float = 60.0) -> Any:
        return await asyncio.to_thread(_wait, check, what, timeout)

    try:
        await until(lambda: _get(address, steady, "first.example") == "blue first.example", "first.example")
        # The listener on the held port comes: the reload fails there, and the rest is applied at once.
        listeners = [
            {"name": "steady", "protocol": "HTTP", "port": steady},
            {"name": "raced", "protocol": "HTTP", "port": raced},
        ]
        patch = {"spec": {"listeners": listeners}}
        code, answer = await asyncio.to_thread(
            raw,
            api,
            "PATCH",
            "/apis/gateway.networking.k8s.io/v1/namespaces/race/gateways/race",
            patch,
            "application/merge-patch+json",
        )
        assert code == 200, answer
        await until(
            lambda: _listener_conditions(api, "raced").get("Accepted") == ("False", "PortUnavailable"),
            "raced PortUnavailable",
        )
        status = await asyncio.to_thread(_read, api, "namespaces/race/gateways/race")
        entry = next(e for e in status["status"]["listeners"] if e["name"] == "raced")
        message = entry["conditions"][0]["message"]
        assert f"nginx could not listen on it: bind() to {address}:{raced} failed (98: " in message, message
        assert _conditions(entry)["Programmed"] == ("False", "Invalid") and entry["attachedRoutes"] == 0
        assert (await asyncio.to_thread(_listener_conditions, api, "steady"))["Programmed"] == (
            "True",
            "Programmed",
        )
        second = _http_route("second", "second.example", TO_BLUE, parent={"name": "race"}, namespace="race")
        await asyncio.to_thread(_create, api, second)
        await until(
            lambda: _get(address, steady, "second.example") == "blue second.example", "a new route served"
        )
        answers = await asyncio.to_thread(lambda: [_get(address, steady, "first.example") for _ in range(20)])
        assert set(answers) == {"blue first.example"}, answers
        assert controller.nginx.running
        # The port freed: found at the next check (every 10 s), listened on, the routes served there.
        holder.close()
        await until(
            lambda: _get(address, raced, "second.example") == "blue second.example",
            "served on the freed port",
        )
        await until(
            lambda: _listener_conditions(api, "raced").get("Accepted") == ("True", "Accepted"),
            "raced Accepted",
        )
    finally:
        holder.close()
        stop.set()
        await asyncio.wait_for(running, 60)
        await kube.close()
    assert not controller.nginx.running
