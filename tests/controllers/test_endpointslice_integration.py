"""The EndpointSlice and Endpoints controllers against the real API server, on their own identities
(RBAC on): slices follow pods' readiness, named ports, 100-endpoint slices, publishNotReadyAddresses,
headless and selector-less Services (a user's slices left alone), and the Endpoints as upstream writes
them. Tests play the kubelet: they bind pods and write their IP and readiness."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.controllers.conftest import eventually, running
from tests.controllers.kubeletplay import make_node

MANAGED = "endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"


@pytest.fixture(scope="module")
def node(v1: client.CoreV1Api) -> Iterator[str]:
    make_node(v1, None, "svc-n1", labels={"topology.kubernetes.io/zone": "z1"})
    yield "svc-n1"
    with contextlib.suppress(ApiException):
        v1.delete_node("svc-n1")


@pytest.fixture(scope="module")
def discovery(api: client.ApiClient) -> client.DiscoveryV1Api:
    return client.DiscoveryV1Api(api)


def start_pod(
    v1: client.CoreV1Api,
    ns: str,
    name: str,
    ip: str,
    node: str,
    ready: bool = True,
    port: int = 8080,
    labels: dict[str, str] | None = None,
) -> None:
    """Create, bind and start a pod as a kubelet would report it."""
    v1.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "ports": [{"name": "http", "containerPort": port}]}
                ]
            },
        },
    )
    v1.create_namespaced_binding(
        ns,
        client.V1Binding(
            metadata=client.V1ObjectMeta(name=name), target=client.V1ObjectReference(kind="Node", name=node)
        ),
        _preload_content=False,
    )
    set_ready(v1, ns, name, ready, ip)


def set_ready(v1: client.CoreV1Api, ns: str, name: str, ready: bool, ip: str | None = None) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status: dict = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": now}],
    }
    if ip:
        status.update(podIP=ip, podIPs=[{"ip": ip}])
    v1.patch_namespaced_pod_status(name, ns, {"status": status})


def make_service(
    v1: client.CoreV1Api, ns: str, name: str = "web", selector: dict | None = None, **spec: object
) -> client.V1Service:
    body = {
        "metadata": {"name": name, "labels": {"team": "a"}},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}], **spec},
    }
    if selector is not False:
        body["spec"]["selector"] = selector or {"app": "web"}
    return v1.create_namespaced_service(ns, body)


def managed(discovery: client.DiscoveryV1Api, ns: str, service: str = "web") -> list[client.V1EndpointSlice]:
    return discovery.list_namespaced_endpoint_slice(
        ns, label_selector=f"kubernetes.io/service-name={service},{MANAGED}"
    ).items


def endpoints_of(discovery: client.DiscoveryV1Api, ns: str, service: str = "web") -> dict[str, tuple]:
    out = {}
    for s in managed(discovery, ns, service):
        for e in s.endpoints or []:
            out[e.addresses[0]] = (
                e.conditions.ready,
                e.conditions.serving,
                e.conditions.terminating,
                tuple((p.name, p.port) for p in s.ports or []),
            )
    return out


async def test_slices_follow_pods_readiness(apiserver, v1, discovery, namespace, node):
    async with running(apiserver, "endpointslice", "endpoint"):
        svc = make_service(v1, namespace)
        placeholder = await eventually(lambda: managed(discovery, namespace), what="placeholder slice")
        assert not placeholder[0].endpoints and not placeholder[0].ports
        start_pod(v1, namespace, "a", "10.244.1.2", node)
        start_pod(v1, namespace, "b", "10.244.1.3", node, ready=False, port=9090)
        await eventually(
            lambda: (
                endpoints_of(discovery, namespace)
                == {
                    "10.244.1.2": (True, True, False, (("http", 8080),)),
                    "10.244.1.3": (False, False, False, (("http", 9090),)),
                }
            ),
            what="both pods, ports resolved per pod",
        )
        slices = managed(discovery, namespace)
        assert len(slices) == 2  # the placeholder gave way to one slice per port mapping
        first = next(s for s in slices if s.ports[0].port == 8080)
        assert first.metadata.name.startswith("web-") and first.address_type == "IPv4"
        assert first.metadata.labels["team"] == "a"
        ref = first.metadata.owner_references[0]
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("Service", "web", svc.metadata.uid, True)
        ep = first.endpoints[0]
        assert (ep.node_name, ep.zone, ep.target_ref.kind, ep.target_ref.name) == (node, "z1", "Pod", "a")
        set_ready(v1, namespace, "b", True)
        set_ready(v1, namespace, "a", False)
        await eventually(
            lambda: (
                endpoints_of(discovery, namespace)
                == {
                    "10.244.1.2": (False, False, False, (("http", 8080),)),
                    "10.244.1.3": (True, True, False, (("http", 9090),)),
                }
            ),
            what="readiness flipped",
        )
        v1.delete_namespaced_pod("b", namespace)  # bound: graceful, stays terminating
        await eventually(
            lambda: endpoints_of(discovery, namespace).get("10.244.1.3", (None,))[:3] == (False, True, True),
            what="terminating but serving",
        )
        v1.delete_namespaced_pod("b", namespace, grace_period_seconds=0)
        v1.delete_namespaced_pod("a", namespace, grace_period_seconds=0)
        await eventually(
            lambda: (s := managed(discovery, namespace)) and len(s) == 1 and not s[0].endpoints,
            what="back to one empty placeholder",
        )


async def test_endpoints_as_upstream_writes_them(apiserver, v1, namespace, node):
    async with running(apiserver, "endpoint"):
        make_service(v1, namespace)
        start_pod(v1, namespace, "a", "10.244.2.2", node)
        start_pod(v1, namespace, "b", "10.244.2.3", node, ready=False)

        def subsets():
            with contextlib.suppress(ApiException):
                return v1.read_namespaced_endpoints("web", namespace).subsets
            return None

        got = await eventually(lambda: (s := subsets()) and s[0].not_ready_addresses and s, what="Endpoints")
        assert [a.ip for a in got[0].addresses] == ["10.244.2.2"]
        assert [a.ip for a in got[0].not_ready_addresses] == ["10.244.2.3"]
        assert (got[0].ports[0].name, got[0].ports[0].port, got[0].ports[0].protocol) == ("http", 8080, "TCP")
        assert got[0].addresses[0].target_ref.name == "a" and got[0].addresses[0].node_name == node
        assert v1.read_namespaced_endpoints("web", namespace).metadata.labels == {"team": "a"}
        v1.delete_namespaced_service("web", namespace)
        await eventually(lambda: subsets() is None and not _exists(v1, namespace), what="Endpoints deleted")


def _exists(v1: client.CoreV1Api, ns: str) -> bool:
    try:
        v1.read_namespaced_endpoints("web", ns)
        return True
    except ApiException as err:
        assert err.status == 404
        return False


async def test_slices_hold_at_most_100_endpoints(apiserver, v1, discovery, namespace, node):
    async with running(apiserver, "endpointslice"):
        make_service(v1, namespace, ports=[{"name": "http", "port": 80, "targetPort": 8080}])
        for i in range(130):
            start_pod(v1, namespace, f"p{i:03}", f"10.244.3.{i + 2}", node)
        await eventually(
            lambda: len(endpoints_of(discovery, namespace)) == 130, timeout=60, what="130 endpoints"
        )
        assert sorted(len(s.endpoints) for s in managed(discovery, namespace)) == [30, 100]


async def test_published_not_ready_headless_and_selectorless(apiserver, v1, discovery, namespace, node):
    async with running(apiserver, "endpointslice", "endpoint"):
        make_service(v1, namespace, "pub", publishNotReadyAddresses=True)
        make_service(v1, namespace, "db", clusterIP="None", ports=[])
        make_service(v1, namespace, "ext", selector=False)
        start_pod(v1, namespace, "a", "10.244.4.2", node, ready=False)
        await eventually(
            lambda: endpoints_of(discovery, namespace, "pub").get("10.244.4.2", (None,))[0] is True,
            what="not-ready pod published as ready",
        )
        headless = await eventually(
            lambda: (s := managed(discovery, namespace, "db")) and s[0].endpoints and s, what="headless slice"
        )
        assert headless[0].metadata.labels["service.kubernetes.io/headless"] == ""
        assert not headless[0].ports
        mine = discovery.create_namespaced_endpoint_slice(
            namespace,
            {
                "metadata": {"name": "ext-mine", "labels": {"kubernetes.io/service-name": "ext"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["192.0.2.10"]}],
                "ports": [{"name": "http", "port": 80}],
            },
        )
        # Another sync round for everything, then the user's slice is still as written and nothing was added.
        set_ready(v1, namespace, "a", True)
        await eventually(
            lambda: endpoints_of(discovery, namespace, "db").get("10.244.4.2", (None,))[0] is True
        )
        assert managed(discovery, namespace, "ext") == []
        kept = discovery.read_namespaced_endpoint_slice("ext-mine", namespace)
        assert kept.metadata.resource_version == mine.metadata.resource_version
        with pytest.raises(ApiException) as err:
            v1.read_namespaced_endpoints("ext", namespace)
        assert err.value.status == 404


async def test_a_new_service_gets_one_slice_and_follows_its_pods_at_once(
    apiserver, v1, discovery, namespace, node
):
    """Issue 31: a new Service got a second slice (its placeholder deleted) and its slices then lagged
    its pods by 10 s or more. Upstream turns the placeholder into the pods' slice (a create and a delete
    become one update) and follows each pod change at once."""
    since = discovery.list_namespaced_endpoint_slice(namespace).metadata.resource_version
    async with running(apiserver, "endpointslice"):
        make_service(v1, namespace)
        await eventually(lambda: managed(discovery, namespace), what="the placeholder slice")
        start_pod(v1, namespace, "a", "10.244.2.2", node)
        await eventually(
            lambda: (
                endpoints_of(discovery, namespace) == {"10.244.2.2": (True, True, False, (("http", 8080),))}
            ),
            what="the pod in the new Service's slice",
        )
        set_ready(v1, namespace, "a", False)
        turned = time.monotonic()
        await eventually(
            lambda: endpoints_of(discovery, namespace).get("10.244.2.2", (None,))[0] is False,
            timeout=3.0,
            what="the slice to follow the pod turning unready within 3 s",
        )
        lag = time.monotonic() - turned
    events = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            discovery.list_namespaced_endpoint_slice,
            namespace,
            resource_version=since,
            timeout_seconds=1,
        )
    ]
    assert [t for t, _ in events if t != "MODIFIED"] == ["ADDED"], events
    assert lag < 3.0
