"""Real nftables (in a network namespace of the test's own): a table written whole and then moved by
the agent's incremental transactions through a run of changes (pods coming, going and getting their
address late, a policy changed, SCTP ports and ranges, an IPv6 ipBlock beside IPv4 ones, every policy
removed, the guard for a pod whose address is not known raised and lowered) holds, after each step,
exactly what a table written whole from the same ruleset holds; the kernel shows the IPv6 block as an
`ip6` match and the SCTP port as `sctp dport` in the same inet table."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from netpolicy.delta import delta
from netpolicy.model import parse_pod, parse_policy
from netpolicy.rules import Cluster, Ruleset, build

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a network namespace and nftables"),
]


def pod(name: str, ip: str, **labels: str) -> dict:
    meta = {"name": name, "namespace": "a", "labels": labels}
    spec = {
        "nodeName": "n1",
        "containers": [
            {"name": "c", "ports": [{"name": "sctp-x", "containerPort": 7000, "protocol": "SCTP"}]}
        ],
    }
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running", "podIP": ip}}


def policy(name: str, **spec: object) -> dict:
    return {"metadata": {"name": name, "namespace": "a"}, "spec": {"podSelector": {}, **spec}}


CLIENTS = {"podSelector": {"matchLabels": {"role": "client"}}}
V6 = {"ipBlock": {"cidr": "fd00:77::/64", "except": ["fd00:77::9/128"]}}
V4 = {"ipBlock": {"cidr": "10.9.0.0/16", "except": ["10.9.1.0/24"]}}
MIXED = policy(
    "mixed",
    podSelector={"matchLabels": {"app": "server"}},
    ingress=[{"from": [CLIENTS, V6, V4], "ports": [{"port": 7777, "endPort": 7780, "protocol": "SCTP"}]}],
    egress=[{"to": [CLIENTS], "ports": [{"port": "sctp-x", "protocol": "SCTP"}]}],
)
DENY = policy("deny")
SERVER, CLIENT = pod("server", "10.0.0.2", app="server"), pod("client", "10.0.0.3", role="client")
STEPS: list[tuple[tuple[dict, ...], tuple[dict, ...]]] = [
    ((SERVER, CLIENT), (MIXED,)),
    ((SERVER, CLIENT, pod("late", "", role="client")), (MIXED,)),
    (
        (SERVER, CLIENT, pod("late", "", role="client"), pod("new-server", "", app="server")),
        (MIXED,),
    ),  # guard
    ((SERVER, CLIENT, pod("late", "10.0.0.7", role="client")), (MIXED,)),  # its address appears
    ((SERVER, pod("late", "10.0.0.7", role="client")), (MIXED, DENY)),
    ((pod("late", "10.0.0.7", role="client"),), (DENY,)),
    ((pod("late", "10.0.0.7", role="client"),), ()),
]


def ruleset(pods: tuple[dict, ...], policies: tuple[dict, ...]) -> Ruleset:
    parsed = tuple(p for p in (parse_pod(o) for o in pods) if p is not None)
    pending = tuple(p for p in (parse_pod(o, pending=True) for o in pods) if p is not None)
    parsed_policies = tuple(parse_policy(p) for p in policies)
    cidrs = {"n1": ("10.0.0.0/24",)}
    return build(Cluster(parsed_policies, parsed, {"a": {}}, frozenset({"n1"}), pending, cidrs))


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"npd-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def nft(netns: str, *args: str, script: str | None = None) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *args], input=script, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, f"nft {args}: {done.stderr}\n{script}"
    return done.stdout


def held(netns: str, table: str) -> dict[str, object]:
    """What the kernel holds, without handles and the table's name, set elements in order."""
    objects = json.loads(nft(netns, "-j", "list", "table", "inet", table))["nftables"]
    out: dict[str, object] = {"chains": set(), "sets": set(), "rules": {}}
    for item in objects:
        [(kind, body)] = item.items()
        if kind == "metainfo" or kind == "table":
            continue
        body = {k: v for k, v in body.items() if k not in ("handle", "table")}
        if "elem" in body:
            body["elem"] = sorted(json.dumps(e, sort_keys=True) for e in body["elem"])
        if kind == "rule":
            out["rules"].setdefault(body["chain"], []).append(json.dumps(body["expr"], sort_keys=True))
        else:
            out[f"{kind if kind != 'map' else 'set'}s"].add(json.dumps(body, sort_keys=True))
    return out


def test_incremental_transactions_leave_the_table_a_whole_write_would(netns: str) -> None:
    first = ruleset(*STEPS[0])
    nft(netns, "-f", "-", script=first.script("moved"))
    previous = first
    for step in STEPS[1:]:
        wanted = ruleset(*step)
        change = delta(previous, wanted, "moved")
        if change:
            nft(netns, "-f", "-", script=change)
        nft(netns, "-f", "-", script=wanted.script("whole"))
        assert held(netns, "moved") == held(netns, "whole"), change
        previous = wanted
    assert not previous.chains


def test_the_guard_is_in_the_forward_chain_before_the_pods_maps(netns: str) -> None:
    nft(netns, "-f", "-", script=ruleset(*STEPS[2]).script("guarded"))
    forward = nft(netns, "list", "chain", "inet", "guarded", "forward")
    assert forward.index("ip daddr @pending-ingress ip daddr != @known-pods drop") < forward.index(
        "ip daddr vmap @ingress-pods"
    )
    assert "elements = { 10.0.0.0/24 }" in nft(netns, "list", "set", "inet", "guarded", "pending-ingress")


def test_the_kernel_holds_sctp_ports_and_the_ipv6_block_in_the_inet_table(netns: str) -> None:
    nft(netns, "-f", "-", script=ruleset(*STEPS[3]).script("listed"))
    listing = nft(netns, "list", "chain", "inet", "listed", "ingress-a/server")
    assert "ip6 saddr fd00:77::/64 ip6 saddr != fd00:77::9 sctp dport 7777-7780 return" in listing
    assert "ip saddr 10.9.0.0/16 ip saddr != 10.9.1.0/24 sctp dport 7777-7780 return" in listing
    egress = nft(netns, "list", "chain", "inet", "listed", "egress-a/server")
    # the named SCTP port, resolved on each destination pod (the late one has its address by now)
    assert "ip daddr { 10.0.0.3, 10.0.0.7 } sctp dport 7000 return" in egress
