"""The NetworkPolicy kind's pure parts: upstream's defaulting and ValidateNetworkPolicySpec."""

from __future__ import annotations

import pytest

from controlplane.apiserver.kinds.networkpolicy import (
    default_policy,
    validate_ip_block,
    validate_policy_spec,
    validate_port,
)


def details(errors) -> list[tuple[str, str]]:
    return [(e.field, e.detail) for e in errors]


@pytest.mark.parametrize(
    ("spec", "types"),
    [
        ({}, ["Ingress"]),
        ({"ingress": [{}]}, ["Ingress"]),
        ({"egress": [{}]}, ["Ingress", "Egress"]),
        ({"egress": []}, ["Ingress"]),
        ({"egress": [{}], "policyTypes": ["Egress"]}, ["Egress"]),
    ],
)
def test_policy_types_default(spec: dict, types: list[str]) -> None:
    default_policy(spec)
    assert spec["policyTypes"] == types


def test_protocol_defaults_to_tcp_and_a_given_one_stays() -> None:
    spec = {
        "ingress": [{"ports": [{"port": 53}, {"port": 53, "protocol": "UDP"}]}],
        "egress": [{"ports": [{}]}],
    }
    default_policy(spec)
    assert [p["protocol"] for p in spec["ingress"][0]["ports"]] == ["TCP", "UDP"]
    assert spec["egress"][0]["ports"] == [{"protocol": "TCP"}]


@pytest.mark.parametrize(
    ("name", "messages"),
    [
        ("http", []),
        ("web-8080", []),
        ("a-very-long-port-name", ["must be no more than 15 characters"]),
        ("80", ["must contain at least one letter (a-z)"]),
        ("a--b", ["must not contain consecutive hyphens"]),
        ("-ab", ["must not begin or end with a hyphen"]),
        ("Http", ["must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"]),
    ],
)
def test_port_names(name: str, messages: list[str]) -> None:
    assert [e.detail for e in validate_port({"port": name}, "p")] == [
        f"Invalid value: {name!r}: {m}".replace("'", '"') for m in messages
    ]


def test_port_ranges() -> None:
    assert validate_port({"port": 80, "endPort": 80}, "p") == []
    assert details(validate_port({"port": 80, "endPort": 70000}, "p")) == [
        ("p.endPort", "Invalid value: 70000: must be between 1 and 65535, inclusive")
    ]
    assert details(validate_port({"port": 65536}, "p")) == [
        ("p.port", "Invalid value: 65536: must be between 1 and 65535, inclusive")
    ]


def test_ip_blocks() -> None:
    assert (
        validate_ip_block({"cidr": "192.168.0.0/16", "except": ["192.168.1.0/24", "192.168.2.7/32"]}, "b")
        == []
    )
    assert details(validate_ip_block({"cidr": "192.168.0.0/16", "except": ["nope", "10.0.0.0/8"]}, "b")) == [
        ("b.except[0]", 'Invalid value: "nope": not a valid CIDR')
    ]
    assert details(validate_ip_block({"cidr": "192.168.1.1"}, "b")) == [
        ("b.cidr", 'Invalid value: "192.168.1.1": not a valid CIDR')
    ]
    assert details(validate_ip_block({"cidr": "10.0.0.0/8", "except": ["fd00::/64"]}, "b")) == [
        ("b.except[0]", 'Invalid value: "fd00::/64": must be a strict subset of `cidr`')
    ]


def test_every_rule_of_both_directions_is_checked() -> None:
    spec = {
        "podSelector": {},
        "ingress": [
            {"ports": [{"port": 1}]},
            {"ports": [{"protocol": "icmp"}], "from": [{"namespaceSelector": {}}]},
        ],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}, {}]}],
    }
    assert [e.field for e in validate_policy_spec(spec)] == [
        "spec.ingress[1].ports[0].protocol",
        "spec.egress[0].to[1]",
    ]
