"""The network-policy agent's pure parts: policies, pods and namespaces parsed once, and the chains
the semantics of upstream's NetworkPolicy give the local pods (isolation per policyType, the union of
rules, selectors of both kinds and both combined, ipBlock with except, ports by number, range and
name, fail-closed withholding)."""

from __future__ import annotations

from netpolicy.model import isolation_only, parse_pod, parse_policy
from netpolicy.rules import Cluster, Ruleset, build, chain_name


def pod(
    name: str,
    ip: str,
    ns: str = "a",
    node: str = "n1",
    ports: dict | None = None,
    ips: list[str] | None = None,
    **labels: str,
) -> dict:
    """A pod as the kubelet reports it; `ips`: its dual-stack status.podIPs (else just `ip`)."""
    containers = [{"name": "c", "ports": [{"name": k, "containerPort": v} for k, v in (ports or {}).items()]}]
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": node, "containers": containers},
        "status": {"phase": "Running", "podIPs": [{"ip": i} for i in ips or [ip]]},
    }


def policy(name: str, ns: str = "a", **spec: object) -> dict:
    body: dict = {"metadata": {"name": name, "namespace": ns}, "spec": {"podSelector": {}}}
    body["spec"].update(spec)
    return body


PODS = [
    pod("server", "10.0.0.2", app="server", ports={"http": 8080}),
    pod("client", "10.0.0.3", role="client"),
    pod("other", "10.0.0.4", role="other"),
    pod("far", "10.0.1.2", ns="b", node="n2", role="client", ports={"http": 9090}),
]
NAMESPACES = {"a": {"team": "a"}, "b": {"team": "b"}}


def ruleset(*policies: dict, nodes: tuple[str, ...] = ("n1",), withheld: frozenset[str] = frozenset()):
    cluster = Cluster(
        tuple(parse_policy(p) for p in policies),
        tuple(p for p in (parse_pod(o) for o in PODS) if p is not None),
        NAMESPACES,
        frozenset(nodes),
    )
    return build(cluster, withheld)


def resolved(built: Ruleset, chain: str) -> list[str]:
    """The chain's rules with each named peer set written out as its elements (sorted)."""
    out = []
    for rule in built.chains[chain]:
        for name, ips in sorted(built.sets.items(), key=lambda item: -len(item[0])):  # a -v6 twin first
            rule = rule.replace(f"@{name}", "{ " + ", ".join(sorted(ips)) + " }")
        out.append(rule)
    return out


def test_no_policy_isolates_nothing() -> None:
    built = ruleset()
    assert built.chains == {} and built.ingress == {} and built.egress == {}


def test_default_deny_ingress_isolates_every_local_pod_of_the_namespace_only() -> None:
    built = ruleset(policy("deny"))
    assert built.ingress == {
        "10.0.0.2": "ingress-a/server",
        "10.0.0.3": "ingress-a/client",
        "10.0.0.4": "ingress-a/other",
    }
    assert built.egress == {}
    assert built.chains["ingress-a/server"] == ["drop"]


def test_pod_selector_peer_and_union_of_policies() -> None:
    built = ruleset(
        policy(
            "from-clients",
            podSelector={"matchLabels": {"app": "server"}},
            ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
        ),
        policy(
            "from-other",
            podSelector={"matchLabels": {"app": "server"}},
            ingress=[{"from": [{"podSelector": {"matchLabels": {"role": "other"}}}]}],
        ),
    )
    assert list(built.ingress) == ["10.0.0.2"]
    assert resolved(built, "ingress-a/server") == [
        "ip saddr { 10.0.0.3 } return",
        "ip saddr { 10.0.0.4 } return",
        "drop",
    ]


def test_namespace_selector_alone_and_combined_with_a_pod_selector() -> None:
    every = {"namespaceSelector": {"matchLabels": {"team": "b"}}}
    both = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}}
    built = ruleset(policy("ns", ingress=[{"from": [every]}, {"from": [both]}]))
    assert resolved(built, "ingress-a/server") == [
        "ip saddr { 10.0.1.2 } return",
        "ip saddr { 10.0.0.3, 10.0.1.2 } return",
        "drop",
    ]


def test_ip_block_with_except_ports_ranges_and_named_ports() -> None:
    block = {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.4/32"]}}
    built = ruleset(
        policy(
            "ports",
            podSelector={"matchLabels": {"app": "server"}},
            ingress=[
                {"from": [block], "ports": [{"port": 80}, {"port": 9000, "endPort": 9100, "protocol": "UDP"}]}
            ],
            egress=[{"ports": [{"port": "http"}, {"protocol": "SCTP"}]}],
        )
    )
    assert built.chains["ingress-a/server"] == [
        "ip saddr 10.0.0.0/16 ip saddr != { 10.0.0.4/32 } meta l4proto tcp th dport 80 return",
        "ip saddr 10.0.0.0/16 ip saddr != { 10.0.0.4/32 } meta l4proto udp th dport 9000-9100 return",
        "drop",
    ]
    # egress by name: each destination pod's own number for it
    assert built.chains["egress-a/server"] == [
        "ip daddr { 10.0.0.2 } meta l4proto tcp th dport 8080 return",
        "ip daddr { 10.0.1.2 } meta l4proto tcp th dport 9090 return",
        "meta l4proto sctp return",
        "drop",
    ]


def test_named_ingress_port_the_pod_lacks_admits_nothing() -> None:
    built = ruleset(policy("named", ingress=[{"ports": [{"port": "http"}]}]))
    assert built.chains["ingress-a/server"] == ["meta l4proto tcp th dport 8080 return", "drop"]
    assert built.chains["ingress-a/client"] == ["drop"]


def test_egress_only_policy_and_remote_pods() -> None:
    built = ruleset(policy("out", ns="b", policyTypes=["Egress"], egress=[{"to": [{"podSelector": {}}]}]))
    assert built.chains == {} and built.egress == {}  # the only pod of b is on n2
    built = ruleset(policy("out", ns="b", policyTypes=["Egress"]), nodes=("n1", "n2"))
    assert built.egress == {"10.0.1.2": "egress-b/far"} and built.ingress == {}
    assert chain_name("egress", parse_pod(PODS[3])) == "egress-b/far"


def test_a_selector_matching_no_pod_admits_nothing_and_withheld_policies_fail_closed() -> None:
    nobody = {"podSelector": {"matchLabels": {"role": "ghost"}}}
    allow = policy("allow-all", ingress=[{}])
    assert resolved(ruleset(policy("x", ingress=[{"from": [nobody]}])), "ingress-a/client") == [
        "ip saddr {  } return",  # an empty set: matches nothing until a pod joins it
        "drop",
    ]
    assert ruleset(allow).chains["ingress-a/client"] == ["return", "drop"]
    assert ruleset(allow, withheld=frozenset({"a/allow-all"})).chains["ingress-a/client"] == ["drop"]


def test_pods_without_a_part_in_policies() -> None:
    host = pod("h", "10.0.0.9")
    host["spec"]["hostNetwork"] = True
    done = pod("d", "10.0.0.8")
    done["status"]["phase"] = "Succeeded"
    pending = pod("p", "10.0.0.7")
    pending["status"] = {"phase": "Pending"}
    assert [parse_pod(p) for p in (host, done, pending)] == [None, None, None]


def test_isolation_only_keeps_selection_and_types() -> None:
    bad = policy("bad", egress=[{"to": [{}]}], podSelector={"matchLabels": {"app": "server"}})
    fallback = isolation_only(bad)
    assert fallback is not None and fallback.ingress == () and fallback.egress == ()
    assert fallback.selector.matches({"app": "server"}) and not fallback.selector.matches({})


def test_one_selection_is_one_set_shared_by_every_rule_naming_it() -> None:
    clients = {"podSelector": {"matchLabels": {"role": "client"}}}
    built = ruleset(
        policy("one", podSelector={"matchLabels": {"app": "server"}}, ingress=[{"from": [clients]}]),
        policy("two", podSelector={"matchLabels": {"role": "other"}}, ingress=[{"from": [clients]}]),
    )
    [name] = built.sets
    assert built.sets[name] == frozenset({"10.0.0.3"})
    assert (
        built.chains["ingress-a/server"][0]
        == built.chains["ingress-a/other"][0]
        == f"ip saddr @{name} return"
    )


def test_sctp_ports_ranges_and_ipv6_blocks_in_their_own_family() -> None:
    v6 = {"ipBlock": {"cidr": "fd00:10::/64", "except": ["fd00:10::5/128"]}}
    v4 = {"ipBlock": {"cidr": "10.0.0.0/24"}}
    built = ruleset(
        policy(
            "mixed",
            podSelector={"matchLabels": {"app": "server"}},
            ingress=[{"from": [v6, v4], "ports": [{"port": 7777, "endPort": 7780, "protocol": "SCTP"}]}],
            egress=[{"to": [v6], "ports": [{"port": "http"}]}],
        )
    )
    assert built.chains["ingress-a/server"] == [
        "ip6 saddr fd00:10::/64 ip6 saddr != { fd00:10::5/128 } meta l4proto sctp th dport 7777-7780 return",
        "ip saddr 10.0.0.0/24 meta l4proto sctp th dport 7777-7780 return",
        "drop",
    ]
    # a named port resolves on the destination pods inside the block: none has an IPv6 address
    assert built.chains["egress-a/server"] == ["drop"]


def test_a_pending_pod_under_a_policy_raises_the_guard_for_its_nodes_pod_cidr() -> None:
    pending = pod("new", "", app="server")
    pending["status"] = {"phase": "Pending"}
    info = parse_pod(pending, pending=True)
    assert info is not None and info.ip == "" and parse_pod(pending) is None
    known = tuple(p for p in (parse_pod(o) for o in PODS) if p is not None)
    deny_in = parse_policy(policy("deny-in", podSelector={"matchLabels": {"app": "server"}}))

    def guards(*pending_pods, node_cidrs=None, policies=(deny_in,)):  # type: ignore[no-untyped-def]
        cidrs = {"n1": ("10.0.0.0/24",)} if node_cidrs is None else node_cidrs
        return build(Cluster(policies, known, NAMESPACES, frozenset({"n1"}), pending_pods, cidrs)).guards

    down = {
        name + suffix: frozenset()
        for name in ("known-pods", "pending-ingress", "pending-egress")
        for suffix in ("", "-v6")
    }
    assert guards(info) == {
        **down,
        "known-pods": frozenset({"10.0.0.2", "10.0.0.3", "10.0.0.4"}),  # the local pods: n1's
        "pending-ingress": frozenset({"10.0.0.0/24"}),
    }
    # a dual-stack node: its IPv6 pod CIDR guarded too, a dual-stack pod known in both families
    dual = parse_pod(pod("dual", "10.0.0.5", ips=["10.0.0.5", "fd00::5"]))
    assert dual is not None and dual.addresses == ("10.0.0.5", "fd00::5")
    both = build(
        Cluster(
            (deny_in,), (dual,), NAMESPACES, frozenset({"n1"}), (info,), {"n1": ("10.0.0.0/24", "fd00::/64")}
        )
    ).guards
    assert both == {
        **down,
        "known-pods": frozenset({"10.0.0.5"}),
        "known-pods-v6": frozenset({"fd00::5"}),
        "pending-ingress": frozenset({"10.0.0.0/24"}),
        "pending-ingress-v6": frozenset({"fd00::/64"}),
    }
    assert guards() == down  # nobody pending
    assert guards(info, policies=()) == down  # pending, but no policy selects it
    assert guards(info, node_cidrs={}) == down  # its node's pod CIDR unknown: nothing to guard
    remote = parse_pod({**pending, "spec": {"nodeName": "n2"}}, pending=True)
    assert guards(remote) == down  # another host's pod: its agent guards it
    unbound = {**pending, "spec": {}}
    assert parse_pod(unbound, pending=True) is None  # not scheduled: nothing runs yet


def test_dual_stack_pods_get_their_ipv6_address_in_the_maps_and_peer_sets() -> None:
    """A pod's IPv6 address (dual-stack status.podIPs) jumps to the same chain as its IPv4 one; once
    any pod has one, each selector peer matches both families through twin sets; a named egress port
    resolves on both addresses of the destination pods; an IPv6-only pod takes part too."""
    pods = [
        pod("server", "10.0.0.2", ips=["10.0.0.2", "fd00::2"], app="server", ports={"http": 8080}),
        pod("client", "10.0.0.3", ips=["10.0.0.3", "fd00::3"], role="client"),
        pod("v6only", "fd00::4", role="client"),
        pod("old", "10.0.0.6", role="client"),
    ]
    clients = {"podSelector": {"matchLabels": {"role": "client"}}}
    policies = (
        policy("in", podSelector={"matchLabels": {"app": "server"}}, ingress=[{"from": [clients]}]),
        policy(
            "out",
            podSelector={"matchLabels": {"role": "client"}},
            policyTypes=["Egress"],
            egress=[
                {"to": [{"podSelector": {"matchLabels": {"app": "server"}}}], "ports": [{"port": "http"}]}
            ],
        ),
    )
    parsed = tuple(p for p in (parse_pod(o) for o in pods) if p is not None)
    assert [p.addresses for p in parsed] == [
        ("10.0.0.2", "fd00::2"),
        ("10.0.0.3", "fd00::3"),
        ("fd00::4",),
        ("10.0.0.6",),
    ]
    built = build(Cluster(tuple(parse_policy(p) for p in policies), parsed, NAMESPACES, frozenset({"n1"})))
    assert built.ingress == {"10.0.0.2": "ingress-a/server", "fd00::2": "ingress-a/server"}
    assert built.egress == {
        "10.0.0.3": "egress-a/client",
        "fd00::3": "egress-a/client",
        "fd00::4": "egress-a/v6only",
        "10.0.0.6": "egress-a/old",
    }
    v6 = sorted(n for n in built.sets if n.endswith("-v6"))
    assert len(v6) == 2 and sorted(built.sets) == sorted([*v6, *(n.removesuffix("-v6") for n in v6)])
    assert resolved(built, "ingress-a/server") == [
        "ip saddr { 10.0.0.3, 10.0.0.6 } return",
        "ip6 saddr { fd00::3, fd00::4 } return",
        "drop",
    ]
    assert built.chains["egress-a/client"] == [
        "ip daddr { 10.0.0.2 } meta l4proto tcp th dport 8080 return",
        "ip6 daddr { fd00::2 } meta l4proto tcp th dport 8080 return",
        "drop",
    ]
    script = built.script()
    assert "add element inet pykubelet-netpol ingress-pods-v6 { fd00::2 : jump ingress-a/server }" in script
    assert "add rule inet pykubelet-netpol forward ip6 daddr vmap @ingress-pods-v6" in script
    # IPv4 only: no IPv6 twin of a peer set
    assert not [n for n in ruleset(policies[0]).sets if n.endswith("-v6")]
