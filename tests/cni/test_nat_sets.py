"""The pod-network sets of the CNI's nft table keep each network as its own element, so adjacent pod
CIDRs (two nodes on one machine, 10.200.0.0/24 and 10.200.1.0/24) can each be forgotten on their own.
(With auto-merge, nftables folded them into one /23 that neither removal could take out.)"""

from __future__ import annotations

import ipaddress
import os

import pytest

from agent.cni import nat

pytestmark = pytest.mark.integration


def elements(set_name: str) -> list[str]:
    out = nat.nft().json(f"list set ip {nat.TABLE} {set_name}") or []
    found: list[str] = []
    for obj in out:
        for elem in (obj.get("set") or {}).get("elem") or []:
            prefix = elem.get("prefix") if isinstance(elem, dict) else None
            found.append(f"{prefix['addr']}/{prefix['len']}" if prefix else str(elem))
    return found


def test_adjacent_networks_are_removed_one_by_one() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: nftables")
    a, b = ipaddress.IPv4Network("10.199.10.0/24"), ipaddress.IPv4Network("10.199.11.0/24")
    try:
        nat.ensure_network(a, masquerade=True)
        nat.ensure_network(b, masquerade=True)
        assert {str(a), str(b)} <= set(elements("pod_nets"))
        nat.remove_network(a)
        left = elements("pod_nets") if nat.nft().json(f"list table ip {nat.TABLE}") else []
        assert str(a) not in left and str(b) in left
        assert str(a) not in elements("masq_nets")
    finally:
        nat.remove_network(a)
        nat.remove_network(b)
