"""discovery.k8s.io/v1 EndpointSlices and core/v1 Endpoints through the official client and kubectl:
defaults, upstream's validation texts, the table kubectl prints, the server's own `kubernetes` slice."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from pykubelet.rig.apiserver import ApiServer
from tests.controlplane.conftest import KUBECTL, Kubectl
from tests.controlplane.test_apiserver_client import raw

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("slices")) as s:
        yield s


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with server.api_client() as a:
        yield a


@pytest.fixture(scope="module")
def kubectl(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    return Kubectl(server.kubeconfig, tmp_path_factory.mktemp("home"))


SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


def _message(err: pytest.ExceptionInfo[ApiException]) -> str:
    assert err.value.status == 422, err.value.body
    return json.loads(err.value.body)["message"]


def _refused(
    server: ApiServer, method: str, path: str, body: dict, content_type: str = "application/json"
) -> str:
    """The message of a 422 (bodies the official client's own checks would stop before sending)."""
    status, answer = raw(server, method, path, body, content_type)
    assert status == 422, answer
    return answer["message"]


def _slice(
    name: str, addresses: list[str], address_type: str = "IPv4", ports: list[dict] | None = None
) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name},
        "addressType": address_type,
        "ports": ports if ports is not None else [{"port": 80}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses],
    }


def test_slices_are_defaulted_and_printed(api: client.ApiClient, kubectl: Kubectl) -> None:
    discovery = client.DiscoveryV1Api(api)
    made = discovery.create_namespaced_endpoint_slice(
        "default", _slice("web-abc", ["10.244.0.5", "10.244.0.6"])
    )
    assert (made.ports[0].name, made.ports[0].protocol, made.ports[0].port) == ("", "TCP", 80)
    discovery.create_namespaced_endpoint_slice(
        "default",
        _slice(
            "many",
            [f"10.244.1.{i}" for i in range(1, 6)],
            ports=[{"name": n, "port": p} for n, p in (("a", 1), ("b", 2), ("c", 3), ("d", 4))],
        ),
    )
    discovery.create_namespaced_endpoint_slice("default", _slice("bare", [], ports=[]))
    rows = {r.split()[0]: r.split() for r in kubectl("get", "endpointslices", "-n", "default").splitlines()}
    assert rows["NAME"] == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert rows["web-abc"][1:4] == ["IPv4", "80", "10.244.0.5,10.244.0.6"]
    assert rows["many"][1:8] == [
        "IPv4",
        "1,2,3",
        "+",
        "1",
        "more...",
        "10.244.1.1,10.244.1.2,10.244.1.3",
        "+",
    ]
    assert rows["bare"][1:4] == ["IPv4", "<unset>", "<unset>"]


def test_slice_validation_has_upstreams_texts(server: ApiServer, api: client.ApiClient) -> None:
    discovery = client.DiscoveryV1Api(api)
    cases = [
        (
            _slice("t", ["10.0.0.1"], address_type="IP"),
            'addressType: Unsupported value: "IP": supported values: "FQDN", "IPv4", "IPv6"',
        ),
        (
            _slice("t", ["fe80::1"]),
            'endpoints[0].addresses[0]: Invalid value: "fe80::1": must be a valid IPv4 address',
        ),
        (
            _slice("t", ["127.0.0.1"]),
            'endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)',
        ),
        (
            _slice("t", ["10.0.0.1"], ports=[{"port": 80, "protocol": "ICMP"}]),
            'ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        ),
        (
            _slice("t", ["10.0.0.1"], ports=[{"name": "Http", "port": 80}]),
            'ports[0].name: Invalid value: "Http"',
        ),
        (_slice("t", ["10.0.0.1"], ports=[{"port": 80}, {"port": 81}]), 'ports[1].name: Duplicate value: ""'),
        (
            _slice("t", [f"10.1.{i // 250}.{i % 250 + 1}" for i in range(1001)]),
            "endpoints: Too many: 1001: must have at most 1000 items",
        ),
        (
            _slice("t", ["web"], address_type="FQDN"),
            'endpoints[0].addresses[0]: Invalid value: "web": should be a domain with at least two segments separated by dots',
        ),
        (
            {**_slice("t", []), "endpoints": [{"addresses": []}]},
            "endpoints[0].addresses: Required value: must contain at least 1 address",
        ),
        (
            {**_slice("t", []), "metadata": {"name": "t", "labels": {"kubernetes.io/service-name": "a b"}}},
            'metadata.labels: Invalid value: "a b"',
        ),
    ]
    for body, text in cases:
        message = _refused(server, "POST", SLICES, body)
        assert message.startswith('EndpointSlice.discovery.k8s.io "t" is invalid: ') and text in message, (
            message
        )
    body = _slice("t", ["10.0.0.1"])
    body.pop("addressType")
    assert "addressType: Required value" in _refused(server, "POST", SLICES, body)
    discovery.create_namespaced_endpoint_slice("default", _slice("fixed", ["10.0.0.1"]))
    with pytest.raises(ApiException) as err:
        discovery.patch_namespaced_endpoint_slice(
            "fixed", "default", {"addressType": "FQDN", "endpoints": []}
        )
    assert 'addressType: Invalid value: "FQDN": field is immutable' in _message(err)


def test_endpoints_validation_has_upstreams_texts(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)

    def endpoints(subsets: list[dict]) -> dict:
        return {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "e"}, "subsets": subsets}

    ok = v1.create_namespaced_endpoints(
        "default", endpoints([{"addresses": [{"ip": "10.244.0.5"}], "ports": [{"port": 80}]}])
    )
    assert ok.subsets[0].ports[0].protocol == "TCP"
    cases = [
        (
            [{"ports": [{"port": 80}]}],
            "subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`",
        ),
        (
            [{"addresses": [{"ip": "nope"}]}],
            'subsets[0].addresses[0].ip: Invalid value: "nope": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)',
        ),
        (
            [{"notReadyAddresses": [{"ip": "169.254.1.1"}]}],
            'subsets[0].notReadyAddresses[0].ip: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)',
        ),
        (
            [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80, "name": "a"}, {"port": 81}]}],
            "subsets[0].ports[1].name: Required value",
        ),
        (
            [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 70000}]}],
            "subsets[0].ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
    ]
    for subsets, text in cases:
        with pytest.raises(ApiException) as err:
            v1.replace_namespaced_endpoints("e", "default", endpoints(subsets))
        assert _message(err).startswith(f'Endpoints "e" is invalid: {text}'), _message(err)


def test_the_server_keeps_a_slice_for_itself(server: ApiServer, api: client.ApiClient) -> None:
    found = client.DiscoveryV1Api(api).read_namespaced_endpoint_slice("kubernetes", "default")
    assert found.metadata.labels == {"kubernetes.io/service-name": "kubernetes"}
    assert found.address_type == "IPv4" and found.endpoints[0].addresses == ["127.0.0.1"]
    assert found.endpoints[0].conditions.ready is True
    assert (found.ports[0].name, found.ports[0].port) == ("https", server.port)
