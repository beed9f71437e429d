"""The EndpointSlice mirroring controller against the real API server, on its own identity (RBAC on): a
selector-less Service with a hand-written Endpoints gets mirrored slices, kept in step with the
Endpoints, removed when the Endpoints goes or the Service gains a selector; the API server's own
`kubernetes` Endpoints (skip-mirror) is left alone."""

from __future__ import annotations

from kubernetes import client

from clusterdns.records import build
from serviceproxy.model import Endpoint, ServicePortName, merge_endpoints
from tests.controllers.conftest import eventually, running

MIRRORED = "endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io"


def mirrored(discovery: client.DiscoveryV1Api, ns: str, name: str = "ext") -> list[client.V1EndpointSlice]:
    return discovery.list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={name},{MIRRORED}"
    ).items


def addresses(slices: list[client.V1EndpointSlice]) -> dict[str, tuple]:
    return {
        e.addresses[0]: (
            s.address_type,
            e.conditions.ready,
            tuple((p.name, p.port, p.protocol) for p in s.ports),
        )
        for s in slices
        for e in s.endpoints or []
    }


def endpoints(addresses: list[str], not_ready: list[str] = (), port: int = 8080) -> dict:
    subset: dict = {"ports": [{"name": "http", "port": port, "protocol": "TCP"}]}
    if addresses:
        subset["addresses"] = [{"ip": ip} for ip in addresses]
    if not_ready:
        subset["notReadyAddresses"] = [{"ip": ip} for ip in not_ready]
    return {
        "metadata": {"name": "ext", "labels": {"team": "a"}, "annotations": {"note": "by hand"}},
        "subsets": [subset],
    }


async def test_a_selectorless_service_gets_mirrored_slices(apiserver, v1, api, namespace):
    discovery = client.DiscoveryV1Api(api)
    async with running(apiserver, "endpointslicemirroring", mirroring_max_endpoints_per_subset=2):
        v1.create_namespaced_service(
            namespace, {"metadata": {"name": "ext"}, "spec": {"ports": [{"name": "http", "port": 80}]}}
        )
        made = v1.create_namespaced_endpoints(namespace, endpoints(["10.9.0.1"], ["10.9.0.2", "10.9.0.5"]))
        slices = await eventually(
            lambda: (s := mirrored(discovery, namespace)) and addresses(s) and s, what="the mirrored slice"
        )
        assert addresses(slices) == {
            "10.9.0.1": ("IPv4", True, (("http", 8080, "TCP"),)),
            "10.9.0.2": ("IPv4", False, (("http", 8080, "TCP"),)),
        }
        (slice_,) = slices
        m = slice_.metadata
        assert m.name.startswith("ext-")
        assert m.labels == {
            "team": "a",
            "kubernetes.io/service-name": "ext",
            "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io",
        }
        assert m.annotations == {"note": "by hand"}
        ref = m.owner_references[0]
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Endpoints", "ext", made.metadata.uid, True)
        warning = await eventually(
            lambda: [
                e
                for e in v1.list_namespaced_event(namespace).items
                if e.reason == "TooManyAddressesToMirror" and e.involved_object.kind == "Endpoints"
            ],
            what="the TooManyAddressesToMirror event",
        )
        assert warning[0].message == (
            "A max of 2 addresses can be mirrored to EndpointSlices per Endpoints subset. 1 addresses were skipped"
        )
        assert (
            warning[0].type == "Warning"
            and warning[0].source.component == "endpoint-slice-mirroring-controller"
        )

        v1.replace_namespaced_endpoints("ext", namespace, endpoints(["10.9.0.3"], port=9090))
        await eventually(
            lambda: (
                addresses(mirrored(discovery, namespace))
                == {"10.9.0.3": ("IPv4", True, (("http", 9090, "TCP"),))}
            ),
            what="the slice to follow the Endpoints",
        )
        after = mirrored(discovery, namespace)
        assert [s.metadata.name for s in after] == [m.name]  # the same slice, rewritten
        # The service proxy's view of the Service (its model, on the slices as the API serves them).
        raw = discovery.api_client.sanitize_for_serialization(
            discovery.list_namespaced_endpoint_slice(namespace).items
        )
        view = merge_endpoints(raw)
        assert view[ServicePortName(namespace, "ext", "http", "TCP")] == (
            Endpoint("10.9.0.3", 9090, True, True, False, ""),
        )

        v1.delete_namespaced_endpoints("ext", namespace)
        await eventually(
            lambda: not mirrored(discovery, namespace), what="the slices to go with the Endpoints"
        )

        v1.create_namespaced_endpoints(namespace, endpoints(["10.9.0.4"]))
        await eventually(lambda: mirrored(discovery, namespace), what="mirrored again")
        v1.patch_namespaced_service("ext", namespace, {"spec": {"selector": {"app": "x"}}})
        await eventually(
            lambda: not mirrored(discovery, namespace), what="no mirror once the Service selects pods"
        )
    kubernetes = discovery.list_namespaced_endpoint_slice("default", label_selector=MIRRORED).items
    assert kubernetes == []  # skip-mirror


async def test_a_headless_selectorless_service_resolves_to_its_mirrored_addresses(
    apiserver, v1, api, namespace
):
    """What cluster DNS answers (its zone, built from the Services and slices as the API serves them)."""
    discovery = client.DiscoveryV1Api(api)
    async with running(apiserver, "endpointslicemirroring"):
        v1.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": "hl"},
                "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]},
            },
        )
        body = endpoints(["10.9.1.1"])
        body["metadata"]["name"] = "hl"
        v1.create_namespaced_endpoints(namespace, body)
        await eventually(lambda: mirrored(discovery, namespace, "hl"), what="the mirrored slice")
    serialize = api.sanitize_for_serialization
    zone = build(
        serialize(v1.list_namespaced_service(namespace).items),
        serialize(discovery.list_namespaced_endpoint_slice(namespace).items),
    )
    answer = zone.lookup(f"hl.{namespace}.svc.cluster.local", "A")
    assert answer.rcode == "NOERROR" and [r.value for r in answer.records] == ["10.9.1.1"]
