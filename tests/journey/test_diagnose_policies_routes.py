"""diagnose on recorded objects for what issue 34 added: the NetworkPolicies selecting a journey's pods
(default deny per direction, the policy named as the boundary when tried traffic did not arrive at a
pod it isolates), and an Ingress or HTTPRoute as the root (its class, backends, Secrets, status)."""

from __future__ import annotations

import datetime as dt

from journey import graph
from journey.diagnose import Facts, Probe, diagnose
from journey.policies import isolation
from journey.routes import RouteFacts
from tests.journey import fixtures as fx

NOW = dt.datetime(2026, 12, 1, 10, 0, 40, tzinfo=dt.UTC)


def netpol(name: str, selector: dict | None = None, ns: str = fx.NS, **spec: object) -> dict:
    body = {"podSelector": {"matchLabels": selector} if selector is not None else {}, **spec}
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": ns}, "spec": body}


def pod_with_ip() -> dict:
    p = fx.pod()
    p["status"]["podIP"] = "10.0.0.5"
    return p


def facts_for(root: dict | None = None, policies: list[dict] | None = None, **pools: object) -> Facts:
    pools.setdefault("Pod", [pod_with_ip()])
    return Facts(
        server="https://api",
        user={"username": "alice", "groups": ["system:authenticated"]},
        journey=graph.build(root or fx.deployment(), fx.pools(**pools)),
        nodes={"node-1": fx.node()},
        leases={"node-1": fx.lease()},
        now=NOW,
        policies=policies or [],
    )


def finding(facts: Facts, boundary: str):  # type: ignore[no-untyped-def]
    verdict = diagnose(facts)
    return verdict, next(f for f in verdict.findings if f.boundary == boundary)


def test_which_policies_select_a_pod_and_what_each_direction_is() -> None:
    pod = pod_with_ip()
    deny = netpol("deny-all", policyTypes=["Ingress", "Egress"])
    allow = netpol(
        "allow-web", {"app": "web"}, ingress=[{"from": [{"podSelector": {}}]}, {"ports": [{"port": 80}]}]
    )
    other_ns = netpol("elsewhere", ns="other")
    not_matching = netpol("db-only", {"app": "db"})
    state = isolation(pod, [deny, allow, other_ns, not_matching])
    assert state.policies == ("allow-web", "deny-all")
    assert state.ingress == "isolated: 2 rules admit (allow-web, deny-all)"
    assert state.egress == "default deny (deny-all)"
    assert isolation(pod, [deny]).ingress == "default deny (deny-all)"
    # a policy stored without policyTypes: Ingress, and Egress too when it has egress rules
    assert isolation(pod, [netpol("out", egress=[{}])]).egress == "isolated: 1 rule admit (out)"
    assert (
        isolation(pod, [other_ns]).describe()
        == "pod web-7d9c-a: no NetworkPolicy selects it (all traffic admitted)"
    )


def test_a_pods_diagnose_names_its_policies() -> None:
    policies = [netpol("deny-in", {"app": "web"})]
    verdict, found = finding(facts_for(pod_with_ip(), policies), "network policy")
    assert verdict.status == "healthy" and found.state == "ok"
    assert found.message == (
        "pod web-7d9c-a: selected by NetworkPolicy deny-in; ingress default deny (deny-in), "
        "egress not isolated"
    )


def test_traffic_that_did_not_arrive_at_a_pod_a_policy_isolates_stalls_at_the_policy() -> None:
    facts = facts_for(policies=[netpol("deny-in", {"app": "web"})])
    facts.probes = [
        Probe("Service web", "10.96.4.2:80", "10.0.0.5:8080", "web-7d9c-a", "node-1", False, False)
    ]
    verdict = diagnose(facts)
    assert verdict.exit_code == 1 and verdict.stalled.boundary == "network policy"
    assert verdict.summary == (
        "stalled at: network policy - Service web: connections from pod web-7d9c-a to 10.0.0.5:8080 do not "
        "arrive, and pod web-7d9c-a's ingress is default deny (deny-in)"
    )
    # the same failure without a policy is the pods' own (the dataplane boundary says so)
    facts.policies = []
    assert diagnose(facts).stalled.boundary == "dataplane"
    # policies that could not be read: skipped, saying why
    facts.policies_note = "cannot list networkpolicies.networking.k8s.io -n demo: forbidden"
    assert finding(facts, "network policy")[1].state == "skipped"


def ingress(**spec: object) -> dict:
    body = {
        "kind": "Ingress",
        "metadata": {"name": "web", "namespace": fx.NS, "uid": "i1", "creationTimestamp": fx.T0},
        "spec": {
            "rules": [
                {
                    "host": "web.example",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "web", "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
            **spec,
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}},
    }
    return body


CLASSES = [
    {
        "metadata": {
            "name": "pykubelet",
            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"},
        }
    },
    {"metadata": {"name": "other"}},
]


def test_an_ingress_routes_through_its_backend_services_pods() -> None:
    facts = facts_for(ingress(ingressClassName="pykubelet"))
    facts.routes = RouteFacts(classes=CLASSES)
    verdict, found = finding(facts, "routes")
    assert [o["kind"] for o in facts.journey.objects] == ["Ingress", "Service", "Pod", "EndpointSlice"]
    assert verdict.status == "healthy", verdict.summary
    assert found.message == "Ingress web: backends web; addresses 192.0.2.10"


def test_an_ingress_without_a_class_or_with_a_missing_one_stalls() -> None:
    facts = facts_for(ingress())
    facts.routes = RouteFacts(classes=CLASSES)
    assert diagnose(facts).summary == (
        "stalled at: routes - Ingress web: it names no IngressClass, so no controller serves it "
        "(IngressClass pykubelet became default after it was created)"
    )
    facts = facts_for(ingress(ingressClassName="nginx"))
    facts.routes = RouteFacts(classes=CLASSES)
    assert diagnose(facts).summary == "stalled at: routes - Ingress web: IngressClass nginx does not exist"


def test_an_ingress_missing_a_backend_a_secret_or_an_address_stalls() -> None:
    facts = facts_for(
        ingress(
            ingressClassName="pykubelet", defaultBackend={"service": {"name": "gone", "port": {"number": 80}}}
        )
    )
    facts.routes = RouteFacts(classes=CLASSES)
    assert diagnose(facts).summary == "stalled at: routes - Ingress web: backend Service gone not found"
    facts = facts_for(ingress(ingressClassName="pykubelet", tls=[{"secretName": "web-tls"}]))
    facts.routes = RouteFacts(classes=CLASSES, missing_secrets=["web-tls"])
    assert diagnose(facts).summary == "stalled at: routes - Ingress web: TLS Secret web-tls not found"
    unserved = ingress(ingressClassName="pykubelet")
    unserved["status"] = {}
    facts = facts_for(unserved)
    facts.routes = RouteFacts(classes=CLASSES)
    assert "no address in status.loadBalancer" in diagnose(facts).summary
    facts.now = dt.datetime(2026, 12, 1, 10, 0, 10, tzinfo=dt.UTC)  # 10 s old: its controller may be busy
    assert finding(facts, "routes")[1].state == "ok"


def httproute(parents: list[dict]) -> dict:
    return {
        "kind": "HTTPRoute",
        "metadata": {"name": "web", "namespace": fx.NS, "uid": "h1", "creationTimestamp": fx.T0},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [
                {
                    "backendRefs": [
                        {"name": "web", "port": 80},
                        {"name": "far", "namespace": "other", "port": 80},
                    ]
                }
            ],
        },
        "status": {"parents": parents},
    }


def parent(
    accepted: str = "True", resolved: str = "True", reason: str = "ResolvedRefs", message: str = ""
) -> dict:
    return {
        "parentRef": {"name": "gw"},
        "controllerName": "pykubelet.io/gateway-controller",
        "conditions": [
            {
                "type": "Accepted",
                "status": accepted,
                "reason": "Accepted" if accepted == "True" else "NotAllowedByListeners",
                "message": "",
            },
            {"type": "ResolvedRefs", "status": resolved, "reason": reason, "message": message},
        ],
    }


def test_an_httproute_accepted_with_resolved_refs_is_healthy() -> None:
    verdict, found = finding(facts_for(httproute([parent()])), "routes")
    assert verdict.status == "healthy", verdict.summary
    assert found.message == "HTTPRoute web: backends web; accepted by gw"
    assert found.evidence == [
        "parent gw (pykubelet.io/gateway-controller): "
        "Accepted=True (Accepted), ResolvedRefs=True (ResolvedRefs)"
    ]


def test_an_httproute_not_accepted_or_unresolved_or_untaken_stalls_with_the_reason() -> None:
    refused = parent(resolved="False", reason="RefNotPermitted", message="backendRef far/other not permitted")
    assert diagnose(facts_for(httproute([refused]))).summary == (
        "stalled at: routes - HTTPRoute web: parent Gateway gw: ResolvedRefs=False RefNotPermitted - "
        "backendRef far/other not permitted"
    )
    summary = diagnose(facts_for(httproute([parent(accepted="False")]))).summary
    assert summary.startswith(
        "stalled at: routes - HTTPRoute web: parent Gateway gw: Accepted=False NotAllowedByListeners"
    )
    assert "no Gateway controller has taken it up" in diagnose(facts_for(httproute([]))).summary
    assert "backend Service web not found" in diagnose(facts_for(httproute([parent()]), Service=[])).summary
