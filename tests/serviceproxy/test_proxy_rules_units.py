"""The proxy's pure parts: Services and slices parsed (bad slices skipped with a reason), endpoints
categorized as upstream, the ruleset kube-proxy's nftables mode would write, and the partial
transaction between two rulesets."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from serviceproxy.model import Endpoint, categorize, merge_endpoints, service_ports
from serviceproxy.nodeaddrs import NodePortAddressError, nodeport_ips, parse_nodeport_addresses
from serviceproxy.rules import (
    REJECT,
    ChainNames,
    NodeSettings,
    build,
    conflicts,
    endpoint_base,
    hash_and_truncate,
)
from serviceproxy.ruleset import Writer

Obj = dict[str, Any]
NODE = NodeSettings("n1", "10.244.0.0/16")


def svc(name: str = "web", ip: str = "10.96.0.20", **spec: Any) -> Obj:
    ports = spec.pop("ports", [{"name": "http", "port": 80, "protocol": "TCP"}])
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"clusterIP": ip, "ports": ports, **spec}}


def eps(service: str = "web", *endpoints: tuple[str, bool, bool, bool, str], port: int = 8080) -> Obj:
    return {
        "metadata": {
            "name": f"{service}-x",
            "namespace": "ns",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": r, "serving": s, "terminating": t}, "nodeName": n}
            for ip, r, s, t, n in endpoints
        ],
    }


def ruleset(services: list[Obj], slices: list[Obj], settings: NodeSettings = NODE):
    ports = [p for s in services for p in service_ports(s)]
    return build(ports, merge_endpoints(slices), settings), ports


def test_chain_names_are_upstreams_hash_and_name() -> None:
    assert hash_and_truncate("ns1/svc1/tcp/p80").endswith("-ns1/svc1/tcp/p80")
    assert len(hash_and_truncate("ns1/svc1/tcp/p80").split("-")[0]) == 8
    assert hash_and_truncate("x" * 300).endswith("...") and len(hash_and_truncate("x" * 300)) == 240


def test_cluster_ip_spreads_evenly_over_ready_endpoints() -> None:
    rs, ports = ruleset(
        [svc()],
        [
            eps(
                "web",
                ("10.244.0.5", True, True, False, "n1"),
                ("10.244.0.6", True, True, False, "n2"),
                ("10.244.0.7", False, False, False, "n2"),
            )
        ],
    )
    names = ChainNames.of(ports[0].name)
    assert dict(rs.sets["service-ips"].elements) == {"10.96.0.20 . tcp . 80": f"goto {names.cluster}"}
    rules = rs.chains[names.cluster].rules
    assert rules[0] == "ip daddr 10.96.0.20 tcp dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade"
    chains = [
        f"endpoint-{endpoint_base(ports[0].name, Endpoint(ip, 8080, True, True, False, ''))}"
        for ip in ("10.244.0.5", "10.244.0.6")
    ]
    assert rules[1] == f"numgen random mod 2 vmap {{ 0 : goto {chains[0]}, 1 : goto {chains[1]} }}"
    assert rs.chains[chains[0]].rules == (
        "ip saddr 10.244.0.5 jump mark-for-masquerade",
        "meta l4proto tcp dnat to 10.244.0.5:8080",
    )
    assert not any("10.244.0.7" in c for c in rs.chains)
    assert dict(rs.sets["cluster-ips"].elements) == {"10.96.0.20": None}


def test_terminating_endpoints_only_when_none_is_ready() -> None:
    both = [("10.244.0.5", True, True, False, "n1"), ("10.244.0.6", False, True, True, "n1")]
    rs, _ = ruleset([svc()], [eps("web", *both)])
    assert not any("10.244.0.6" in c for c in rs.chains)
    rs, _ = ruleset(
        [svc()],
        [eps("web", ("10.244.0.6", False, True, True, "n1"), ("10.244.0.8", False, False, True, "n1"))],
    )
    assert any("10.244.0.6" in c for c in rs.chains) and not any("10.244.0.8" in c for c in rs.chains)


def test_no_endpoints_reject_at_once_and_get_no_chains() -> None:
    rs, _ = ruleset([svc(type="NodePort", ports=[{"name": "http", "port": 80, "nodePort": 30080}])], [])
    assert dict(rs.sets["no-endpoint-services"].elements) == {"10.96.0.20 . tcp . 80": f"goto {REJECT}"}
    assert dict(rs.sets["no-endpoint-nodeports"].elements) == {"tcp . 30080": f"goto {REJECT}"}
    assert not rs.sets["service-ips"].elements and not [c for c in rs.chains if "/" in c]


def test_node_ports_and_external_traffic_policy_local() -> None:
    spec = {
        "type": "NodePort",
        "externalTrafficPolicy": "Local",
        "ports": [{"name": "http", "port": 80, "nodePort": 30080}],
    }
    rs, ports = ruleset(
        [svc(**spec)],
        [eps("web", ("10.244.0.5", True, True, False, "n1"), ("10.244.1.5", True, True, False, "n2"))],
    )
    names = ChainNames.of(ports[0].name)
    assert dict(rs.sets["service-nodeports"].elements) == {"tcp . 30080": f"goto {names.external}"}
    external = rs.chains[names.external].rules
    assert external[0].startswith(f"ip saddr 10.244.0.0/16 goto {names.cluster}")
    assert external[-1] == f"goto {names.local}"
    assert (
        "10.244.1.5" not in rs.chains[names.local].rules[-1] and "mod 1" in rs.chains[names.local].rules[-1]
    )
    # Cluster policy masquerades everything external.
    rs, ports = ruleset(
        [svc(**{**spec, "externalTrafficPolicy": "Cluster"})],
        [eps("web", ("10.244.0.5", True, True, False, "n1"))],
    )
    assert rs.chains[ChainNames.of(ports[0].name).external].rules == (
        "jump mark-for-masquerade",
        f"goto {ChainNames.of(ports[0].name).cluster}",
    )
    # Local with no local endpoint: dropped from outside (not rejected), pods still served.
    rs, _ = ruleset([svc(**spec)], [eps("web", ("10.244.1.5", True, True, False, "n2"))])
    assert dict(rs.sets["no-endpoint-nodeports"].elements) == {"tcp . 30080": "drop"}


def test_internal_traffic_policy_local_drops_without_local_endpoints() -> None:
    rs, ports = ruleset(
        [svc(internalTrafficPolicy="Local")], [eps("web", ("10.244.1.5", True, True, False, "n2"))]
    )
    assert dict(rs.sets["no-endpoint-services"].elements) == {"10.96.0.20 . tcp . 80": "drop"}
    rs, ports = ruleset(
        [svc(internalTrafficPolicy="Local")],
        [eps("web", ("10.244.0.5", True, True, False, "n1"), ("10.244.1.5", True, True, False, "n2"))],
    )
    names = ChainNames.of(ports[0].name)
    assert dict(rs.sets["service-ips"].elements)["10.96.0.20 . tcp . 80"] == f"goto {names.local}"
    assert names.cluster not in rs.chains


def test_session_affinity_client_ip() -> None:
    rs, ports = ruleset(
        [svc(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})],
        [eps("web", ("10.244.0.5", True, True, False, "n1"))],
    )
    base = endpoint_base(ports[0].name, Endpoint("10.244.0.5", 8080, True, True, False, ""))
    affinity = rs.sets[f"affinity-{base}"]
    assert affinity.dynamic and affinity.timeout == 60 and affinity.flags == ("dynamic", "timeout")
    assert (
        f"ip saddr @affinity-{base} goto endpoint-{base}"
        in rs.chains[ChainNames.of(ports[0].name).cluster].rules
    )
    assert f"update @affinity-{base} {{ ip saddr }}" in rs.chains[f"endpoint-{base}"].rules


def test_services_the_proxy_leaves_alone() -> None:
    ignored = [
        svc("h", "None"),
        svc("x", "", type="ExternalName"),
        {
            **svc("o"),
            "metadata": {
                "name": "o",
                "namespace": "ns",
                "labels": {"service.kubernetes.io/service-proxy-name": "other"},
            },
        },
    ]
    assert [p for s in ignored for p in service_ports(s)] == []


def test_malformed_slices_are_skipped_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    bad = eps("web", ("10.244.0.5", True, True, False, "n1"))
    bad["endpoints"].append({"addresses": ["not-an-ip"]})
    bad["ports"].append({"name": "none", "protocol": "TCP"})
    with caplog.at_level(logging.WARNING, logger="proxy"):
        merged = merge_endpoints(
            [bad, {"metadata": {"name": "nolabel", "namespace": "ns"}, "addressType": "IPv4"}]
        )
    assert [e.ip for eps_ in merged.values() for e in eps_] == ["10.244.0.5"]
    assert "not an IPv4 address" in caplog.text and "no port number" in caplog.text


def test_categorize_uses_conditions_as_upstream() -> None:
    port = service_ports(svc())[0]
    ready = Endpoint("10.0.0.1", 80, True, True, False, "n1")
    terminating = Endpoint("10.0.0.2", 80, False, True, True, "n1")
    assert categorize(port, (ready, terminating), "n1").cluster == (ready,)
    assert categorize(port, (terminating,), "n1").cluster == (terminating,)
    assert not categorize(port, (Endpoint("10.0.0.3", 80, False, False, False, "n1"),), "n1").has_any


def test_partial_sync_touches_only_what_changed() -> None:
    writer = Writer("kp")
    one, _ = ruleset(
        [svc(), svc("db", "10.96.0.30")],
        [
            eps("web", ("10.244.0.5", True, True, False, "n1")),
            eps("db", ("10.244.0.9", True, True, False, "n1")),
        ],
    )
    two, _ = ruleset(
        [svc(), svc("db", "10.96.0.30")],
        [
            eps("web", ("10.244.0.5", True, True, False, "n1"), ("10.244.0.6", True, True, False, "n1")),
            eps("db", ("10.244.0.9", True, True, False, "n1")),
        ],
    )
    script = writer.partial(one, two)
    assert "db" not in script and "10.244.0.6" in script
    assert writer.partial(two, two) == ""
    gone, _ = ruleset([svc("db", "10.96.0.30")], [eps("db", ("10.244.0.9", True, True, False, "n1"))])
    removal = writer.partial(two, gone)
    assert "delete element ip kp service-ips { 10.96.0.20 . tcp . 80 }" in removal
    assert removal.index("delete element") < removal.index("delete chain")


def _lb(**spec: Any) -> Obj:
    body = svc(
        type="LoadBalancer",
        ports=[{"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP"}],
        **spec,
    )
    body["status"] = {
        "loadBalancer": {
            "ingress": [{"ip": "192.0.2.10", "ipMode": "VIP"}, {"ip": "192.0.2.99", "ipMode": "Proxy"}]
        }
    }
    return body


def test_load_balancer_ips_get_rules_except_proxy_mode_ones() -> None:
    rs, ports = ruleset([_lb()], [eps("web", ("10.244.0.5", True, True, False, "n1"))])
    names = ChainNames.of(ports[0].name)
    service_ips = dict(rs.sets["service-ips"].elements)
    assert service_ips["192.0.2.10 . tcp . 80"] == f"goto {names.external}"
    assert "192.0.2.99 . tcp . 80" not in service_ips  # ipMode Proxy: the balancer rewrites the address
    assert not rs.sets["firewall-ips"].elements and names.firewall not in rs.chains


def test_load_balancer_source_ranges_drop_other_sources_before_dnat() -> None:
    ranges = ["10.0.0.0/8", "172.16.0.0/12"]
    rs, ports = ruleset(
        [_lb(loadBalancerSourceRanges=ranges)], [eps("web", ("10.244.0.5", True, True, False, "n1"))]
    )
    names = ChainNames.of(ports[0].name)
    assert dict(rs.sets["firewall-ips"].elements) == {"192.0.2.10 . tcp . 80": f"goto {names.firewall}"}
    assert rs.chains[names.firewall].rules == ("ip saddr != { 10.0.0.0/8, 172.16.0.0/12 } drop",)
    assert "ct state new jump firewall-check" in rs.chains["filter-prerouting"].rules
    assert "ct state new jump firewall-check" in rs.chains["filter-output"].rules
    assert rs.chains["firewall-check"].rules == ("ip daddr . meta l4proto . th dport vmap @firewall-ips",)
    # A range holding the node admits the LB IPs as sources (a node reaching its own VIP).
    node = NodeSettings("n1", "10.244.0.0/16", node_ips=("10.1.2.3",))
    rs, _ = ruleset(
        [_lb(loadBalancerSourceRanges=ranges)], [eps("web", ("10.244.0.5", True, True, False, "n1"))], node
    )
    assert rs.chains[names.firewall].rules == ("ip saddr != { 10.0.0.0/8, 172.16.0.0/12, 192.0.2.10 } drop",)
    # The legacy annotation, when the field is empty; invalid entries skipped.
    body = _lb()
    body["metadata"]["annotations"] = {
        "service.beta.kubernetes.io/load-balancer-source-ranges": "1.2.3.0/24, x"
    }
    rs, _ = ruleset([body], [eps("web", ("10.244.0.5", True, True, False, "n1"))])
    assert rs.chains[names.firewall].rules == ("ip saddr != { 1.2.3.0/24 } drop",)


def test_nodeport_addresses_and_unallocated_cluster_ips() -> None:
    spec = {"type": "NodePort", "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}
    node = NodeSettings("n1", "10.244.0.0/16", nodeport_ips=("10.1.2.3",), service_cidrs=("10.96.0.0/16",))
    rs, _ = ruleset([svc(**spec)], [eps("web", ("10.244.0.5", True, True, False, "n1"))], node)
    assert dict(rs.sets["nodeport-ips"].elements) == {"10.1.2.3": None}
    assert (
        rs.chains["services"].rules[1]
        == "ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"
    )
    assert rs.chains["service-endpoints-check"].rules[1].startswith("ip daddr @nodeport-ips ")
    assert rs.chains["cluster-ips-check"].rules == (
        'ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"',
        'ip daddr { 10.96.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"',
    )
    rs, _ = ruleset([svc(**spec)], [])  # the default settings: every local address, no drop rule
    assert "nodeport-ips" not in rs.sets
    assert rs.chains["services"].rules[1].startswith("fib daddr type local ip daddr != 127.0.0.0/8 ")
    assert len(rs.chains["cluster-ips-check"].rules) == 1


def test_nodeport_addresses_resolve_as_kube_proxy_does() -> None:
    local = ("10.1.2.3", "192.168.5.1", "172.17.0.1")
    assert nodeport_ips(parse_nodeport_addresses(""), ("10.1.2.3",), local) == ("10.1.2.3",)
    assert nodeport_ips(parse_nodeport_addresses("primary"), (), local) is None  # no node IP: all
    assert nodeport_ips(parse_nodeport_addresses("192.168.0.0/16,172.16.0.0/12"), ("10.1.2.3",), local) == (
        "172.17.0.1",
        "192.168.5.1",
    )
    assert nodeport_ips(parse_nodeport_addresses("192.168.0.0/16,primary"), ("10.1.2.3",), local) == (
        "10.1.2.3",
        "192.168.5.1",
    )
    assert nodeport_ips(parse_nodeport_addresses("0.0.0.0/0"), ("10.1.2.3",), local) is None
    with pytest.raises(NodePortAddressError, match='"nope" is not "primary" or a valid CIDR'):
        parse_nodeport_addresses("10.0.0.0/8,nope")


def test_a_node_port_given_twice_leaves_out_the_later_service_port_only() -> None:
    """Two NodePort Services with nodePort 30080 (stored before the API server checked them): the
    earlier by name keeps the node port, the later gets no rules at all, a third is untouched; one
    Service's own UDP and TCP on one node port are no conflict."""
    np = [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]
    both = [
        {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP", "nodePort": 30053},
    ]
    services = [
        svc("a", "10.96.0.21", type="NodePort", ports=np),
        svc("b", "10.96.0.22", type="NodePort", ports=np),
        svc("c", "10.96.0.23", type="NodePort", ports=both),
    ]
    slices = [eps(n, ("10.0.0.5", True, True, False, "n1")) for n in ("a", "b", "c")]
    ports = [p for s in services for p in service_ports(s)]
    refused = conflicts(ports)
    assert {str(n): reason for n, reason in refused.items()} == {
        "ns/b:http": "node port tcp . 30080 is already programmed for service port ns/a:http"
    }
    rs, _ = ruleset(services, slices)
    nodeports = dict(rs.sets["service-nodeports"].elements)
    assert set(nodeports) == {"tcp . 30080"}
    # c has no endpoints for its ports: both its node ports refuse at once, neither was left out
    assert {k for k, _ in rs.sets["no-endpoint-nodeports"].elements} == {"udp . 30053", "tcp . 30053"}
    assert "ns/a/" in nodeports["tcp . 30080"]
    assert not any("/ns/b/" in c for c in rs.chains)
    assert not any(k.startswith("10.96.0.22 ") for k, _ in rs.sets["service-ips"].elements)
