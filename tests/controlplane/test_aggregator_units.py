"""The aggregation layer's pure parts: request attributes of proxied paths (upstream's RequestInfo), the
requestheader headers, the APIService printer cells, and what discovery adds for aggregated groups."""

from __future__ import annotations

import pytest

from controlplane.apiserver.aggregator.apis import APIServiceInfo, APIServices, aggregated_items
from controlplane.apiserver.aggregator.proxy import escape_extra_key, user_headers
from controlplane.apiserver.aggregator.requestinfo import attributes
from controlplane.apiserver.authn import UserInfo
from controlplane.apiserver.kinds.apiservice import available_cell, service_cell

ALICE = UserInfo(
    "alice", groups=("dev", "system:authenticated"), extra=(("scopes.example.com/x", ("a", "b")),)
)


@pytest.mark.parametrize(
    ("method", "tail", "query", "expected"),
    [
        ("GET", "nodes", {}, ("list", "nodes", "", "", "")),
        ("GET", "nodes/n1", {}, ("get", "nodes", "", "n1", "")),
        ("GET", "namespaces/ns/pods", {}, ("list", "pods", "ns", "", "")),
        ("GET", "namespaces/ns/pods/p", {}, ("get", "pods", "ns", "p", "")),
        ("GET", "namespaces/ns/pods", {"watch": "true"}, ("watch", "pods", "ns", "", "")),
        ("GET", "watch/namespaces/ns/pods", {}, ("watch", "pods", "ns", "", "")),
        ("GET", "pods", {"fieldSelector": "metadata.name=p"}, ("list", "pods", "", "p", "")),
        ("POST", "namespaces/ns/widgets", {}, ("create", "widgets", "ns", "", "")),
        ("DELETE", "namespaces/ns/widgets", {}, ("deletecollection", "widgets", "ns", "", "")),
        ("PUT", "namespaces/ns/widgets/w/status", {}, ("update", "widgets", "ns", "w", "status")),
        ("GET", "namespaces/ns", {}, ("get", "namespaces", "ns", "ns", "")),
    ],
)
def test_request_attributes(method: str, tail: str, query: dict[str, str], expected: tuple[str, ...]) -> None:
    attrs = attributes(ALICE, method, "metrics.k8s.io", "v1beta1", tail, query, "/x")
    assert (attrs.verb, attrs.resource, attrs.namespace, attrs.name, attrs.subresource) == expected
    assert attrs.api_group == "metrics.k8s.io" and attrs.resource_request


def test_requestheader_headers() -> None:
    assert user_headers(ALICE) == [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "dev"),
        ("X-Remote-Group", "system:authenticated"),
        ("X-Remote-Extra-scopes.example.com%2Fx", "a"),
        ("X-Remote-Extra-scopes.example.com%2Fx", "b"),
    ]
    assert escape_extra_key("a b/c") == "a%20b%2Fc"


def _apiservice(
    name: str, group: str, version: str, available: bool = True, service: bool = True, priority: int = 100
) -> dict:
    spec: dict = {"group": group, "version": version, "groupPriorityMinimum": priority, "versionPriority": 10}
    if service:
        spec["service"] = {"namespace": "kube-system", "name": "api"}
    status = {
        "conditions": [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "Passed" if available else "MissingEndpoints",
            }
        ]
    }
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_printer_cells() -> None:
    assert service_cell(_apiservice("v1.x.io", "x.io", "v1")) == "kube-system/api"
    assert service_cell(_apiservice("v1.apps", "apps", "v1", service=False)) == "Local"
    assert available_cell(_apiservice("v1.x.io", "x.io", "v1")) == "True"
    assert available_cell(_apiservice("v1.x.io", "x.io", "v1", available=False)) == "False (MissingEndpoints)"
    assert available_cell({"metadata": {"name": "v1.x.io"}}) == "Unknown"


def test_discovery_additions() -> None:
    apis = APIServices.__new__(APIServices)
    apis.by_name, apis.resources, apis.listeners = {}, {}, []
    for obj in (
        _apiservice("v1beta1.metrics.k8s.io", "metrics.k8s.io", "v1beta1"),
        _apiservice("v1.apps", "apps", "v1", service=False),
        _apiservice("v1.z.io", "z.io", "v1", available=False, priority=1000),
    ):
        info = APIServiceInfo.parse(obj)
        apis.by_name[info.name] = info
    assert apis.remote("apps", "v1") is None and apis.remote("metrics.k8s.io", "v1beta1") is not None
    assert [g for g, _ in apis.remote_groups({"apps"})] == [
        "z.io",
        "metrics.k8s.io",
    ]  # by groupPriorityMinimum
    apis.resources[("metrics.k8s.io", "v1beta1")] = [
        {"name": "nodes", "kind": "NodeMetrics", "namespaced": False, "verbs": ["list", "get"]},
        {"name": "pods", "kind": "PodMetrics", "namespaced": True, "verbs": ["get", "list"]},
    ]
    items = {i["metadata"]["name"]: i["versions"][0] for i in aggregated_items(apis, {"apps"})}
    assert items["z.io"] == {"version": "v1", "resources": [], "freshness": "Stale"}
    metrics = items["metrics.k8s.io"]
    assert metrics["freshness"] == "Current"
    assert [
        (r["resource"], r["scope"], r["responseKind"]["kind"], r["verbs"]) for r in metrics["resources"]
    ] == [
        ("nodes", "Cluster", "NodeMetrics", ["get", "list"]),
        ("pods", "Namespaced", "PodMetrics", ["get", "list"]),
    ]
