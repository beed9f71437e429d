"""The EndpointSlice and Endpoints controllers' decisions without a server: which pods count, named
ports per pod, conditions, slices of at most N, keeping endpoints in place, placeholders, repacking."""

from __future__ import annotations

from typing import Any

from controlplane.controllers.endpoints import desired_subsets, truncate
from controlplane.controllers.endpointslice import SliceTracker
from controlplane.controllers.endpointslice_pods import ServiceInfo, find_port
from controlplane.controllers.endpointslice_reconcile import reconcile

Obj = dict[str, Any]


def service(ports: list[Obj] | None = None, **spec: Any) -> ServiceInfo:
    return ServiceInfo.of(
        {
            "metadata": {"name": "web", "namespace": "ns", "uid": "svc-uid", "labels": {"team": "a"}},
            "spec": {
                "selector": {"app": "web"},
                "ports": ports
                if ports is not None
                else [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
                **spec,
            },
        }
    )


def pod(name: str, ip: str, ready: bool = True, port: int = 8080, node: str = "n1", **meta: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "web"}, **meta},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": port}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def known(_name: str) -> tuple[bool, str | None]:
    return True, "zone-a"


def as_created(plan_slices: list[Obj]) -> list[Obj]:
    out = []
    for i, s in enumerate(plan_slices):
        s = {**s, "metadata": {**s["metadata"], "name": f"web-{i}", "resourceVersion": "1"}}
        out.append(s)
    return out


def test_named_ports_resolve_per_pod_and_split_slices() -> None:
    pods = [pod("a", "10.0.0.1", port=8080), pod("b", "10.0.0.2", port=9090), pod("c", "10.0.0.3", port=8080)]
    plan = reconcile(service(), pods, [], known)
    assert len(plan.create) == 2 and not plan.update and not plan.delete
    by_port = {s["ports"][0]["port"]: s for s in plan.create}
    assert [e["addresses"] for e in by_port[8080]["endpoints"]] == [["10.0.0.1"], ["10.0.0.3"]]
    assert by_port[9090]["ports"] == [{"name": "http", "port": 9090, "protocol": "TCP"}]
    first = by_port[8080]
    assert first["metadata"]["labels"] == {
        "team": "a",
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    assert first["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "web",
        "uid": "svc-uid",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert first["endpoints"][0] == {
        "addresses": ["10.0.0.1"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a", "uid": "uid-a"},
        "nodeName": "n1",
        "zone": "zone-a",
    }


def test_a_port_no_pod_has_gives_no_port_and_no_crash() -> None:
    p = pod("a", "10.0.0.1")
    assert find_port(p, {"targetPort": "nope", "protocol": "TCP"}) is None
    assert find_port(p, {"targetPort": "http", "protocol": "UDP"}) is None
    plan = reconcile(service([{"name": "x", "port": 80, "targetPort": "nope"}]), [p], [], known)
    assert plan.create[0]["ports"] == [] and plan.create[0]["endpoints"][0]["addresses"] == ["10.0.0.1"]


def test_conditions_for_unready_terminating_and_published_pods() -> None:
    pods = [
        pod("a", "10.0.0.1", ready=False),
        pod("b", "10.0.0.2", deletionTimestamp="2026-01-01T00:00:00Z"),
        {**pod("c", "10.0.0.3"), "status": {"phase": "Succeeded", "podIP": "10.0.0.3"}},
        {**pod("d", ""), "status": {"phase": "Pending"}},
    ]
    conditions = [e["conditions"] for e in reconcile(service(), pods, [], known).create[0]["endpoints"]]
    assert conditions == [
        {"ready": False, "serving": False, "terminating": False},
        {"ready": False, "serving": True, "terminating": True},
    ]
    published = reconcile(service(publishNotReadyAddresses=True), pods, [], known).create[0]["endpoints"]
    assert [e["conditions"]["ready"] for e in published] == [True, True]


def test_at_most_n_per_slice_and_endpoints_stay_in_place() -> None:
    pods = [pod(f"p{i:03}", f"10.0.{i // 200}.{i % 200 + 1}") for i in range(250)]
    plan = reconcile(service(), pods, [], known, max_per_slice=100)
    assert [len(s["endpoints"]) for s in plan.create] == [100, 100, 50]
    existing = as_created(plan.create)
    again = reconcile(service(), pods, existing, known, max_per_slice=100)
    assert again.empty
    # One pod goes, one comes: only the slice that held the old one changes, and takes the new one.
    gone = pods[5]
    newcomer = pod("z", "10.9.9.9")
    after = reconcile(
        service(), [p for p in pods if p is not gone] + [newcomer], existing, known, max_per_slice=100
    )
    assert (
        not after.create and not after.delete and [s["metadata"]["name"] for s in after.update] == ["web-0"]
    )
    addresses = [e["addresses"][0] for e in after.update[0]["endpoints"]]
    assert "10.0.0.6" not in addresses and addresses[-1] == "10.9.9.9" and len(addresses) == 100


def test_no_endpoints_keep_one_placeholder_and_emptied_slices_go() -> None:
    plan = reconcile(service(), [], [], known)
    assert len(plan.create) == 1 and plan.create[0]["endpoints"] == [] and plan.create[0]["ports"] == []
    placeholder = as_created(plan.create)
    assert reconcile(service(), [], placeholder, known).empty
    filled = reconcile(service(), [pod("a", "10.0.0.1")], placeholder, known)
    # As upstream's finalize: the slice that would be created takes the placeholder's name (an update)
    # instead of a new slice beside a deleted one.
    assert not filled.create and not filled.delete
    assert [s["metadata"]["name"] for s in filled.update] == ["web-0"]
    assert [e["addresses"] for e in filled.update[0]["endpoints"]] == [["10.0.0.1"]]
    emptied = reconcile(service(), [], filled.update, known)
    # The emptied slice becomes the placeholder the same way.
    assert not emptied.create and not emptied.delete
    assert [(s["metadata"]["name"], s["ports"], s["endpoints"]) for s in emptied.update] == [
        ("web-0", [], [])
    ]


def test_a_slice_of_another_owner_is_deleted_not_reused() -> None:
    placeholder = as_created(reconcile(service(), [], [], known).create)
    placeholder[0]["metadata"]["ownerReferences"][0]["uid"] = "an-older-service"
    plan = reconcile(service(), [pod("a", "10.0.0.1")], placeholder, known)
    assert [s["metadata"]["name"] for s in plan.delete] == ["web-0"] and len(plan.create) == 1


def test_pods_on_unknown_nodes_wait_unless_published() -> None:
    plan = reconcile(service(), [pod("a", "10.0.0.1", node="ghost")], [], lambda _n: (False, None))
    assert plan.skipped and plan.create[0]["endpoints"] == []
    published = reconcile(
        service(publishNotReadyAddresses=True),
        [pod("a", "10.0.0.1", node="ghost")],
        [],
        lambda _n: (False, None),
    )
    assert not published.skipped and published.create[0]["endpoints"][0]["addresses"] == ["10.0.0.1"]


def test_headless_services_mark_slices_and_publish_hostnames() -> None:
    p = pod("a", "10.0.0.1")
    p["spec"].update(hostname="db-0", subdomain="web")
    plan = reconcile(service([], clusterIP="None"), [p], [], known)
    created = plan.create[0]
    assert created["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
    assert created["endpoints"][0]["hostname"] == "db-0" and created["ports"] == []


def test_endpoints_subsets_repack_ready_and_not_ready() -> None:
    pods = [pod("b", "10.0.0.10"), pod("a", "10.0.0.9", ready=False), pod("c", "10.0.0.2", port=9090)]
    subsets = desired_subsets(service(), pods)
    assert [
        (
            [a["ip"] for a in s.get("addresses", [])],
            [a["ip"] for a in s.get("notReadyAddresses", [])],
            s["ports"],
        )
        for s in subsets
    ] == [
        (["10.0.0.2"], [], [{"name": "http", "port": 9090, "protocol": "TCP"}]),
        (["10.0.0.10"], ["10.0.0.9"], [{"name": "http", "port": 8080, "protocol": "TCP"}]),
    ]
    assert subsets[1]["addresses"][0] == {
        "ip": "10.0.0.10",
        "nodeName": "n1",
        "targetRef": {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "uid-b"},
    }
    terminating = pod("t", "10.0.0.7", deletionTimestamp="2026-01-01T00:00:00Z")
    assert desired_subsets(service(), [terminating]) == []
    assert (
        desired_subsets(service(publishNotReadyAddresses=True), [terminating])[0]["addresses"][0]["ip"]
        == "10.0.0.7"
    )


def test_endpoints_over_capacity_are_truncated() -> None:
    subsets = desired_subsets(
        service(), [pod(f"p{i}", f"10.1.{i // 250}.{i % 250 + 1}") for i in range(1200)]
    )
    kept, truncated = truncate(subsets)
    assert truncated and sum(len(s["addresses"]) for s in kept) == 1000
    assert truncate(kept) == (kept, False)


def test_the_tracker_judges_staleness_from_the_cache_not_from_event_order() -> None:
    """Issue 31: the watch event of a write can arrive before the write's answer; the cache already
    showing the write must count as caught up (before, the Service was ignored for 10 s)."""
    tracker = SliceTracker()
    slice_ = {"metadata": {"name": "web-abc", "resourceVersion": "12"}}
    tracker.wrote("ns/web", "web-abc", "12")  # recorded after the cache saw it
    assert not tracker.stale("ns/web", [slice_])
    tracker.wrote("ns/web", "web-abc", "15")
    assert tracker.stale("ns/web", [slice_])  # the cache is behind the update
    assert not tracker.stale("ns/web", [{"metadata": {"name": "web-abc", "resourceVersion": "15"}}])
    tracker.wrote("ns/web", "web-abc", None)
    assert tracker.stale("ns/web", [slice_])  # deleted, still cached
    assert not tracker.stale("ns/web", [])
    tracker.wrote("ns/web", "web-new", "20")
    assert tracker.stale("ns/web", [])  # created, not cached yet
