"""The Gateway API's pure parts: hostname intersection of a listener and a route, per-address weights
that give each backendRef its weight's share whatever its endpoint count, conditions keeping their
transition time while their status stays, and another implementation's parents left alone."""

from __future__ import annotations

from ingresscontroller import gateway, model


def _route(hostnames: list[str], *refs: dict) -> dict:
    return {
        "metadata": {"name": "r", "namespace": "ns", "generation": 2},
        "spec": {
            "hostnames": hostnames,
            "parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": list(refs)}],
        },
    }


def test_hostnames_intersect() -> None:
    assert gateway._hostnames({"hostname": "*.example.com"}, _route(["a.example.com", "b.other"])) == [
        "a.example.com"
    ]
    assert gateway._hostnames({"hostname": "a.example.com"}, _route(["*.example.com"])) == ["a.example.com"]
    assert gateway._hostnames({}, _route(["x.example"])) == ["x.example"]
    assert gateway._hostnames({"hostname": "a.example"}, _route([])) == ["a.example"]
    assert gateway._hostnames({"hostname": "a.example"}, _route(["b.example"])) is None
    assert gateway._hostnames({"hostname": "*.example.com"}, _route(["a.b.example.com"])) == [
        "a.b.example.com"
    ]


def _slice(name: str, *ips: str) -> dict:
    return {
        "addressType": "IPv4",
        "ports": [{"name": "", "port": 8080}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
    }


def test_each_backend_gets_its_weights_share() -> None:
    cluster = model.Cluster(
        services={
            f"ns/{n}": {"metadata": {"name": n}, "spec": {"ports": [{"port": 80}]}} for n in ("a", "b")
        },
        slices={"ns/a": [_slice("a", "10.0.0.1", "10.0.0.2", "10.0.0.3")], "ns/b": [_slice("b", "10.0.1.1")]},
        secrets={},
    )
    route = _route([], {"name": "a", "port": 80, "weight": 90}, {"name": "b", "port": 80, "weight": 10})
    upstream, reason, _ = gateway._backends(route, 0, route["spec"]["rules"][0], cluster)
    assert reason == "" and upstream is not None
    weights = dict(zip(upstream.addresses, upstream.weights, strict=True))
    share_a = sum(w for a, w in weights.items() if a.startswith("10.0.0.")) / sum(weights.values())
    assert share_a == 0.9 and weights["10.0.1.1:8080"] == 1
    missing = _route([], {"name": "gone", "port": 80})
    assert gateway._backends(missing, 0, missing["spec"]["rules"][0], cluster)[:2] == (
        None,
        "BackendNotFound",
    )
    other_ns = _route([], {"name": "a", "namespace": "x", "port": 80})
    assert gateway._backends(other_ns, 0, other_ns["spec"]["rules"][0], cluster)[:2] == (
        None,
        "RefNotPermitted",
    )


def test_transition_times_kept_while_the_status_stays() -> None:
    old = [{"type": "Accepted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    same = gateway.with_transition_times([{"type": "Accepted", "status": "True"}], old, "NOW")
    flipped = gateway.with_transition_times([{"type": "Accepted", "status": "False"}], old, "NOW")
    assert (
        same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z" and flipped[0]["lastTransitionTime"] == "NOW"
    )


def test_routes_of_other_implementations_get_no_status_from_us() -> None:
    config = model.Config()
    route = _route(["a.example"], {"name": "a", "port": 80})
    statuses = gateway.build(
        config, [], [], [route], model.Cluster({}, {}, {}), "pykubelet.io/gateway-controller", "192.0.2.1"
    )
    assert statuses.routes == {} and config.servers == {}
