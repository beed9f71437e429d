"""Parsing of the network configuration: the error codes the spec requires and containerd's keys."""

from __future__ import annotations

import ipaddress
import json

import pytest

from agent.cni import errors
from agent.cni.errors import CniError
from agent.cni.netconf import CniArgs, PortMapping, parse_netconf


def conf(**kw: object) -> bytes:
    base = {
        "cniVersion": "1.0.0",
        "name": "net",
        "type": "pykubelet-cni",
        "ipam": {"ranges": [[{"subnet": "10.1.2.0/24"}]]},
    }
    base.update(kw)
    return json.dumps(base).encode()


def code_of(data: bytes) -> int:
    with pytest.raises(CniError) as info:
        parse_netconf(data)
    return info.value.code


def test_defaults_follow_host_local() -> None:
    nc = parse_netconf(conf())
    r = nc.ranges[0]
    assert r.subnet == ipaddress.IPv4Network("10.1.2.0/24")
    assert str(r.gateway) == "10.1.2.1"
    assert (str(r.start), str(r.end)) == ("10.1.2.1", "10.1.2.254")
    candidates = r.candidates()
    assert r.gateway not in candidates
    assert str(candidates[0]) == "10.1.2.2" and str(candidates[-1]) == "10.1.2.254"
    assert nc.data_dir == "/var/lib/cni/networks"


def test_explicit_range_and_fields() -> None:
    nc = parse_netconf(
        conf(
            bridge="br9",
            mtu=1400,
            ipMasq=True,
            hairpinMode=False,
            isDefaultGateway=False,
            isGateway=False,
            dataDir="/x",
            ipam={
                "ranges": [
                    [
                        {
                            "subnet": "10.9.0.0/16",
                            "gateway": "10.9.0.254",
                            "rangeStart": "10.9.1.0",
                            "rangeEnd": "10.9.1.9",
                        }
                    ]
                ]
            },
        )
    )
    assert (nc.bridge, nc.mtu, nc.ip_masq, nc.hairpin_mode, nc.is_gateway, nc.data_dir) == (
        "br9",
        1400,
        True,
        False,
        False,
        "/x",
    )
    assert len(nc.ranges[0].candidates()) == 10


def test_port_mappings_keys_are_case_insensitive() -> None:
    runtime = {
        "portMappings": [
            {"HostPort": 8080, "ContainerPort": 80, "Protocol": "TCP", "HostIP": ""},
            {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.9"},
            {"hostPort": 9000, "containerPort": 90, "hostIP": "::1"},
        ]
    }
    nc = parse_netconf(conf(runtimeConfig=runtime))
    assert nc.port_mappings == [PortMapping(8080, 80, "tcp", ""), PortMapping(5353, 53, "udp", "192.0.2.9")]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"{not json", errors.DECODE_FAILURE),
        (b"[]", errors.DECODE_FAILURE),
        (conf(cniVersion="9.9.9"), errors.INCOMPATIBLE_VERSION),
        (conf(name=""), errors.INVALID_CONFIG),
        (conf(ipam={"ranges": [[{"subnet": "nonsense"}]]}), errors.INVALID_CONFIG),
        (conf(ipam={"ranges": [[{"subnet": "fd00::/64"}]]}), errors.INVALID_CONFIG),
        (conf(ipam={"ranges": [[{"subnet": "10.0.0.0/24", "gateway": "10.0.1.1"}]]}), errors.INVALID_CONFIG),
        (conf(ipam={}), errors.INVALID_CONFIG),
        (conf(mtu=10), errors.INVALID_CONFIG),
        (conf(ipMasq="yes"), errors.INVALID_CONFIG),
        (conf(bridge="a-name-longer-than-15"), errors.INVALID_CONFIG),
        (conf(bridge="../all"), errors.INVALID_CONFIG),
        (conf(name=".."), errors.INVALID_CONFIG),
        (conf(name="a/b"), errors.INVALID_CONFIG),
        (conf(runtimeConfig={"portMappings": [{"hostPort": 0, "containerPort": 80}]}), errors.INVALID_CONFIG),
        (
            conf(runtimeConfig={"portMappings": [{"hostPort": 1, "containerPort": 80, "protocol": "icmp"}]}),
            errors.INVALID_CONFIG,
        ),
    ],
)
def test_errors_carry_spec_codes(data: bytes, code: int) -> None:
    assert code_of(data) == code


def test_error_json_shape() -> None:
    err = CniError(errors.INVALID_ENV, "missing environment variables", "CNI_NETNS")
    assert json.loads(err.to_json()) == {
        "cniVersion": "1.0.0",
        "code": 4,
        "msg": "missing environment variables",
        "details": "CNI_NETNS",
    }


def test_missing_env_is_code_4() -> None:
    args = CniArgs.from_env({"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "x"})
    with pytest.raises(CniError) as info:
        args.require("container_id", "netns", "ifname")
    assert info.value.code == errors.INVALID_ENV
    assert "CNI_NETNS" in info.value.details and "CNI_IFNAME" in info.value.details


def test_loopback_needs_no_addressing() -> None:
    nc = parse_netconf(json.dumps({"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}))
    assert nc.type == "loopback" and nc.ranges == []


def test_gc_attachments() -> None:
    nc = parse_netconf(conf(**{"cni.dev/valid-attachments": [{"containerID": "a", "ifname": "eth0"}]}))
    assert nc.valid_attachments == [("a", "eth0")]


@pytest.mark.parametrize(
    ("cid", "ifname"),
    [
        ('x"; flush ruleset', "eth0"),
        ("-lead", "eth0"),
        ("ok", "a-name-longer-than-15"),
        ("ok", "e/0"),
        ("ok", ".."),
    ],
)
def test_invalid_ids_and_ifnames_are_code_4(cid: str, ifname: str) -> None:
    args = CniArgs.from_env(
        {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": cid, "CNI_NETNS": "/n", "CNI_IFNAME": ifname}
    )
    with pytest.raises(CniError) as info:
        args.require("container_id", "netns", "ifname")
    assert info.value.code == errors.INVALID_ENV


def test_valid_ids_pass() -> None:
    args = CniArgs.from_env({"CNI_CONTAINERID": "a1b2_c.d-e", "CNI_NETNS": "/n", "CNI_IFNAME": "net1"})
    args.require("container_id", "netns", "ifname")
