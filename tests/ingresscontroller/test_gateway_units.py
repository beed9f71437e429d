"""The Gateway API's pure parts: hostname intersection of a listener and a route, per-address weights
that give each backendRef its weight's share whatever its endpoint count, conditions keeping their
transition time while their status stays, and another implementation's parents left alone."""

from __future__ import annotations

import base64

from ingresscontroller import gateway, gatewaykinds, model


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


def test_a_rule_with_one_service_uses_that_services_upstream() -> None:
    """Rules (of any route) sending to one Service share its upstream, the one an Ingress to it uses;
    a weighted split has its own."""
    cluster = model.Cluster(
        services={
            f"ns/{n}": {"metadata": {"name": n}, "spec": {"ports": [{"port": 80}]}} for n in ("a", "b")
        },
        slices={"ns/a": [_slice("a", "10.0.0.2", "10.0.0.1")], "ns/b": [_slice("b", "10.0.1.1")]},
        secrets={},
    )
    service = model.resolve_backend("ns", {"service": {"name": "a", "port": {"number": 80}}}, cluster)
    for index, refs in enumerate(([{"name": "a", "port": 80}], [{"name": "a", "port": 80, "weight": 7}])):
        route = _route([], *refs)
        assert gateway._backends(route, index, route["spec"]["rules"][0], cluster) == (service, "", "")
    assert service.name == "ns_a_80" and service.addresses == ("10.0.0.1:8080", "10.0.0.2:8080")
    split = _route([], {"name": "a", "port": 80}, {"name": "b", "port": 80})
    upstream = gateway._backends(split, 0, split["spec"]["rules"][0], cluster)[0]
    assert upstream is not None and upstream.name == "route_ns_r_0"


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


def _grant(namespace: str, kind: str, from_kind: str, from_namespace: str, name: str = "") -> dict:
    to = {"group": "", "kind": kind, **({"name": name} if name else {})}
    return {
        "metadata": {"name": "g", "namespace": namespace},
        "spec": {
            "from": [{"group": gateway.GROUP, "kind": from_kind, "namespace": from_namespace}],
            "to": [to],
        },
    }


def test_a_reference_grant_lets_a_backend_in_another_namespace_be_used() -> None:
    cluster = model.Cluster(
        services={"x/a": {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}}},
        slices={"x/a": [_slice("a", "10.0.0.1")]},
        secrets={},
    )
    route = _route([], {"name": "a", "namespace": "x", "port": 80})
    rule = route["spec"]["rules"][0]
    granted = [_grant("x", "Service", "HTTPRoute", "ns")]
    upstream, reason, _ = gateway._backends(route, 0, rule, cluster, granted)
    assert reason == "" and upstream is not None and upstream.addresses == ("10.0.0.1:8080",)
    for wrong in (
        _grant("x", "Service", "HTTPRoute", "other"),  # from another namespace
        _grant("x", "Secret", "HTTPRoute", "ns"),  # to another kind
        _grant("x", "Service", "HTTPRoute", "ns", name="b"),  # to another Service by name
        _grant("y", "Service", "HTTPRoute", "ns"),  # in another namespace than the target's
    ):
        assert gateway._backends(route, 0, rule, cluster, [wrong])[1] == "RefNotPermitted"


def _https_gateway(ref: dict) -> dict:
    listener = {"name": "https", "protocol": "HTTPS", "port": 443, "tls": {"certificateRefs": [ref]}}
    return {
        "metadata": {"name": "gw", "namespace": "ns", "generation": 3},
        "spec": {"gatewayClassName": "ours", "listeners": [listener]},
    }


def _listener_conditions(ref: dict, secrets: dict, grants: list[dict]) -> dict[str, tuple[str, str]]:
    statuses = gateway.build(
        model.Config(),
        [{"metadata": {"name": "ours"}, "spec": {"controllerName": "c"}}],
        [_https_gateway(ref)],
        [],
        model.Cluster({}, {}, secrets),
        "c",
        "192.0.2.1",
        grants=grants,
        check=lambda cert, key: None if cert == b"good" else "tls.crt is not a PEM certificate",
    )
    (listener,) = statuses.gateways["ns/gw"]["listeners"]
    assert listener["supportedKinds"] == [{"group": gateway.GROUP, "kind": "HTTPRoute"}]
    return {c["type"]: (c["status"], c["reason"]) for c in listener["conditions"]}


def _secret(namespace: str, cert: bytes) -> dict:
    data = {"tls.crt": base64.b64encode(cert).decode(), "tls.key": base64.b64encode(b"key").decode()}
    return {"metadata": {"name": "s", "namespace": namespace}, "data": data}


def test_https_listener_certificate_refs_as_the_conformance_tests_expect() -> None:
    good = {"ns/s": _secret("ns", b"good"), "other/s": _secret("other", b"good")}
    resolved = _listener_conditions({"name": "s"}, good, [])
    assert resolved["ResolvedRefs"] == ("True", "ResolvedRefs") and resolved["Programmed"] == (
        "True",
        "Programmed",
    )
    for ref, secrets in (
        ({"name": "missing"}, good),
        ({"name": "s", "kind": "ConfigMap"}, good),
        ({"name": "s", "group": "example.com"}, good),
        ({"name": "s"}, {"ns/s": _secret("ns", b"malformed")}),
    ):
        conditions = _listener_conditions(ref, secrets, [])
        assert conditions["ResolvedRefs"] == ("False", "InvalidCertificateRef"), ref
        assert conditions["Programmed"] == ("False", "Invalid")
    across = {"name": "s", "namespace": "other"}
    assert _listener_conditions(across, good, [])["ResolvedRefs"] == ("False", "RefNotPermitted")
    assert _listener_conditions(across, {}, [])["ResolvedRefs"] == ("False", "RefNotPermitted")  # missing too
    granted = [_grant("other", "Secret", "Gateway", "ns")]
    assert _listener_conditions(across, good, granted)["ResolvedRefs"] == ("True", "ResolvedRefs")


def test_a_kind_is_watched_once_its_crd_is_established_and_serves_the_version() -> None:
    def crd(established: str, versions: list[tuple[str, bool]]) -> dict:
        return {
            "spec": {"versions": [{"name": n, "served": s} for n, s in versions]},
            "status": {"conditions": [{"type": "Established", "status": established}]},
        }

    assert gatewaykinds.established(crd("True", [("v1", True)]), "v1")
    assert not gatewaykinds.established(crd("False", [("v1", True)]), "v1")  # being set up
    assert not gatewaykinds.established(crd("True", [("v1", False)]), "v1")  # not served
    assert not gatewaykinds.established(crd("True", [("v1beta1", True)]), "v1")  # an older release
    assert not gatewaykinds.established(None, "v1")


def _gateway(name: str, **allowed: object) -> dict:
    listener = {"name": "http", "protocol": "HTTP", "port": 80, "allowedRoutes": allowed}
    return {
        "metadata": {"name": name, "namespace": "infra", "generation": 1},
        "spec": {"gatewayClassName": "ours", "listeners": [listener]},
    }


def _statuses(
    gateways: list[dict], routes: list[dict], labels: dict[str, dict[str, str]]
) -> gateway.Statuses:
    cluster = model.Cluster(
        services={"ns/s": {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}},
        slices={"ns/s": [_slice("s", "10.0.0.1")]},
        secrets={},
        namespace_labels=labels,
    )
    classes = [{"metadata": {"name": "ours"}, "spec": {"controllerName": "ctl"}}]
    return gateway.build(model.Config(), classes, gateways, routes, cluster, "ctl", "1.2.3.4")


def _reasons(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_listener_route_kinds_as_the_conformance_suite_expects() -> None:
    """gateway-invalid-route-kind: an unknown kind is ResolvedRefs False InvalidRouteKinds, supportedKinds
    keeps only HTTPRoute, and no route attaches (attachedRoutes 0)."""
    only_invalid = _gateway("only", namespaces={"from": "All"}, kinds=[{"kind": "InvalidRoute"}])
    mixed = _gateway(
        "mixed", namespaces={"from": "All"}, kinds=[{"kind": "InvalidRoute"}, {"kind": "HTTPRoute"}]
    )
    route = _route([], {"name": "s", "port": 80})
    route["spec"]["parentRefs"] = [{"name": "mixed", "namespace": "infra", "sectionName": "http"}]
    statuses = _statuses([only_invalid, mixed], [route], {})
    for name, kinds in (("only", []), ("mixed", [{"group": gateway.GROUP, "kind": "HTTPRoute"}])):
        (listener,) = statuses.gateways[f"infra/{name}"]["listeners"]
        assert listener["supportedKinds"] == kinds and listener["attachedRoutes"] == 0
        assert _reasons(listener)["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    (parent,) = statuses.routes["ns/r"]["parents"]
    assert _reasons(parent)["Accepted"] == ("False", "NotAllowedByListeners")


def test_allowed_routes_from_a_namespace_selector() -> None:
    selector = {"matchLabels": {"gateway": "yes"}}
    gw = _gateway("gw", namespaces={"from": "Selector", "selector": selector})
    route = _route([], {"name": "s", "port": 80})
    route["spec"]["parentRefs"] = [{"name": "gw", "namespace": "infra"}]
    statuses = _statuses([gw], [route], {"ns": {"gateway": "yes"}, "infra": {}})
    assert _reasons(statuses.routes["ns/r"]["parents"][0])["Accepted"] == ("True", "Accepted")
    assert statuses.gateways["infra/gw"]["listeners"][0]["attachedRoutes"] == 1
    statuses = _statuses([gw], [route], {"ns": {"gateway": "no"}, "infra": {}})
    assert _reasons(statuses.routes["ns/r"]["parents"][0])["Accepted"] == ("False", "NotAllowedByListeners")
    expressions = {"matchExpressions": [{"key": "gateway", "operator": "Exists"}]}
    gw["spec"]["listeners"][0]["allowedRoutes"]["namespaces"]["selector"] = expressions
    statuses = _statuses([gw], [route], {"ns": {"gateway": "no"}})
    assert _reasons(statuses.routes["ns/r"]["parents"][0])["Accepted"] == ("True", "Accepted")


def test_mirror_backends_resolve_like_backend_refs() -> None:
    cluster = model.Cluster(
        services={"ns/s": {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}},
        slices={"ns/s": [_slice("s", "10.0.0.1")]},
        secrets={},
    )

    def mirror(**ref: object) -> dict:
        return {"type": "RequestMirror", "requestMirror": {"backendRef": {"port": 80, **ref}}}

    route = _route([])
    rule = {"filters": [mirror(name="s"), mirror(name="gone"), mirror(name="s", namespace="x")]}
    copies, problem = gateway._mirrors(route, rule, cluster, [])
    assert [u.addresses for u in copies] == [("10.0.0.1:8080",)]
    assert problem[0] == "RefNotPermitted"  # the last problem is the one said
    assert gateway._mirrors(route, {"filters": [mirror(name="gone")]}, cluster, [])[1][0] == "BackendNotFound"
