"""Gateway API through the cluster's Gateway implementation, as on any cluster that has one: a Gateway
with an HTTP listener on port 80, an HTTPRoute to a Deployment's Service, the Gateway Programmed, then
curl to `status.addresses[0].value` at the listener's port with the route's Host header reaching the pod.
Beside it, listeners that cannot be served are reported with upstream's reasons while the good one keeps
serving: HTTP and HTTPS on one port of one Gateway (Conflicted True ProtocolConflict, Accepted and
Programmed False, as the conformance suite's gateway-listener-protocol-and-route-kind-conflicts expects)
and, where the Gateway's address is this machine's (the project's stack), a listener on a port this test
holds (Accepted False PortUnavailable).

The Gateway API is CRDs a cluster's admin installs before any implementation; this suite never installs
cluster-wide objects on its own, so it skips where the CRDs or an accepted GatewayClass are absent. To
run it on a cluster without them (the project's own stack, which does not ship them), name the release's
standard channel file in E2E_GATEWAY_API_CRDS (e.g. gateway-api v1.2.1 `standard-install.yaml`): it is
applied as the admin would, and removed again at the end. E2E_GATEWAY_CLASS picks the GatewayClass
(default: the first one Accepted)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.test_ingress import certificate, curl, deployment, ready_replicas, service, tls_secret
from e2e.waiting import wait_for

pytestmark = pytest.mark.integration

GROUP, VERSION = "gateway.networking.k8s.io", "v1"


def _crds_installed(api_client: Any) -> bool:
    try:
        client.ApiextensionsV1Api(api_client).read_custom_resource_definition(f"gateways.{GROUP}")
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def _kubectl(kubeconfig: Path, *args: str) -> None:
    subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], check=True, capture_output=True, timeout=180
    )


@pytest.fixture(scope="module")
def gateway_class(api_client: Any, kubeconfig: Path) -> Iterator[str]:
    """The GatewayClass the Gateways name (E2E_GATEWAY_CLASS, else the first Accepted one)."""
    installed = ""
    if not _crds_installed(api_client):
        installed = os.environ.get("E2E_GATEWAY_API_CRDS", "")
        if not installed:
            pytest.skip("the Gateway API CRDs are not installed (E2E_GATEWAY_API_CRDS names a file to apply)")
        _kubectl(kubeconfig, "apply", "--server-side", "-f", installed)
        _kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    objects = client.CustomObjectsApi(api_client)

    def accepted() -> str:
        wanted = os.environ.get("E2E_GATEWAY_CLASS")
        for cls in objects.list_cluster_custom_object(GROUP, VERSION, "gatewayclasses")["items"]:
            conditions = _conditions(cls.get("status") or {})
            if conditions.get("Accepted", ("", ""))[0] == "True" and cls["metadata"]["name"] in (
                wanted or cls["metadata"]["name"],
            ):
                return cls["metadata"]["name"]
        return ""

    try:
        # An implementation makes or accepts its class once the CRDs exist: a minute for it.
        name = accepted() or (
            wait_for(accepted, timeout=60, what="an Accepted GatewayClass") if installed else ""
        )
        if not name:
            pytest.skip("no Accepted GatewayClass on this cluster (set E2E_GATEWAY_CLASS)")
        yield name
    finally:
        if installed:
            _kubectl(kubeconfig, "delete", "--timeout=120s", "-f", installed)


def _conditions(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj.get("conditions") or []}


def _gateway(name: str, cls: str, *listeners: dict) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Gateway",
        "metadata": {"name": name},
        "spec": {"gatewayClassName": cls, "listeners": list(listeners)},
    }


def _status(objects: client.CustomObjectsApi, namespace: str, plural: str, name: str) -> dict:
    return objects.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name).get("status") or {}


def _listeners(objects: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, dict]:
    return {e["name"]: e for e in _status(objects, namespace, "gateways", name).get("listeners") or []}


def _programmed(objects: client.CustomObjectsApi, namespace: str, name: str) -> str:
    """The Gateway's first address once it is Programmed."""
    status = _status(objects, namespace, "gateways", name)
    if _conditions(status).get("Programmed", ("", ""))[0] != "True":
        return ""
    return (status.get("addresses") or [{}])[0].get("value", "")


def _answer(host: str, address: str, port: int) -> str:
    code, body = curl(f"http://{host}:{port}/", host, address, port)
    return body if code == 200 else f"<{code}>"


def test_a_gateway_serves_its_listener_port_beside_conflicting_listeners(
    api_client: Any, kube: Any, namespace: str, node_name: str, image: str, gateway_class: str, tmp_path: Path
) -> None:
    apps, objects = client.AppsV1Api(api_client), client.CustomObjectsApi(api_client)
    apps.create_namespaced_deployment(namespace, deployment("web-a", node_name, image))
    kube.create_namespaced_service(namespace, service("web-a"))
    cert, key, _ = certificate("gw.example", tmp_path, "gw")
    kube.create_namespaced_secret(namespace, tls_secret("gw-cert", cert, key))
    https = {"certificateRefs": [{"kind": "Secret", "name": "gw-cert"}]}
    gw = _gateway(
        "gw",
        gateway_class,
        {"name": "web", "protocol": "HTTP", "port": 80},
        {"name": "clash-http", "protocol": "HTTP", "port": 8443},
        {"name": "clash-https", "protocol": "HTTPS", "port": 8443, "tls": https},
    )
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "gateways", gw)
    route = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HTTPRoute",
        "metadata": {"name": "web"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "hostnames": ["gw.example"],
            "rules": [{"backendRefs": [{"name": "web-a", "port": 80}]}],
        },
    }
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "httproutes", route)
    wait_for(lambda: ready_replicas(apps, namespace, "web-a") == 1, timeout=120, what="web-a ready")
    address = wait_for(
        lambda: _programmed(objects, namespace, "gw"), timeout=120, what="the Gateway Programmed, its address"
    )
    wait_for(lambda: _answer("gw.example", address, 80) == "web-a", timeout=60, what="gw.example on port 80")

    def parent_accepted() -> bool:
        parents = _status(objects, namespace, "httproutes", "web").get("parents") or []
        return any(_conditions(p).get("Accepted", ("", ""))[0] == "True" for p in parents)

    wait_for(parent_accepted, timeout=30, what="the HTTPRoute Accepted by its Gateway")
    listeners = wait_for(
        lambda: (
            (found := _listeners(objects, namespace, "gw"))
            and _conditions(found.get("clash-https", {})).get("Conflicted", ("", ""))[0] == "True"
            and found
        ),
        timeout=30,
        what="the conflicting listeners reported",
    )
    web = _conditions(listeners["web"])
    assert web["Accepted"] == ("True", "Accepted") and web["Programmed"] == ("True", "Programmed"), web
    assert listeners["web"]["attachedRoutes"] == 1
    for name in ("clash-http", "clash-https"):
        conditions = _conditions(listeners[name])
        assert conditions["Conflicted"] == ("True", "ProtocolConflict"), (name, conditions)
        assert conditions["Accepted"][0] == "False" and conditions["Programmed"][0] == "False", conditions
        assert listeners[name]["attachedRoutes"] == 0
    gateway_conditions = _conditions(_status(objects, namespace, "gateways", "gw"))
    assert gateway_conditions["Programmed"] == ("True", "Programmed"), gateway_conditions
    # The good listener keeps serving: 20 answers in a row from the pod.
    assert all(_answer("gw.example", address, 80) == "web-a" for _ in range(20))
    assert _answer("nobody.example", address, 80) == "<404>"  # no route for that host


def test_a_listener_on_a_port_something_else_holds(
    api_client: Any, namespace: str, gateway_class: str
) -> None:
    objects = client.CustomObjectsApi(api_client)
    # A hostname of its own: distinct from another test's listener on port 80 (one address may serve
    # every Gateway of a class, and two listeners on a port without hostnames conflict).
    gw = _gateway(
        "held", gateway_class, {"name": "free", "protocol": "HTTP", "port": 80, "hostname": "held.example"}
    )
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "gateways", gw)
    address = wait_for(
        lambda: _programmed(objects, namespace, "held"), timeout=120, what="the Gateway Programmed"
    )
    holder = socket.socket()
    try:
        try:
            holder.bind((address, 0))
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:
                pytest.skip(f"the Gateway's address {address} is not this machine's: no port to hold there")
            raise
        holder.listen()
        port = holder.getsockname()[1]
        listeners = [*gw["spec"]["listeners"], {"name": "taken", "protocol": "HTTP", "port": port}]
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "gateways", "held", {"spec": {"listeners": listeners}}
        )
        found = wait_for(
            lambda: (entries := _listeners(objects, namespace, "held")).get("taken") and entries,
            timeout=60,
            what="the taken listener's status",
        )
        taken = _conditions(found["taken"])
        assert taken["Accepted"] == ("False", "PortUnavailable"), taken
        assert taken["Programmed"][0] == "False" and found["taken"]["attachedRoutes"] == 0
        assert _conditions(found["free"])["Programmed"] == ("True", "Programmed")
        assert _answer("any.example", address, 80) == "<404>"  # the free listener listens (no route: 404)
    finally:
        holder.close()
