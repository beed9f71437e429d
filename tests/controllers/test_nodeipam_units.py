"""The node IPAM's CIDR set (upstream's cidrset rules): blocks handed out in order from after the last
one, occupied blocks skipped, larger ranges occupying every block they cover, release returning a block
without reusing it at once, exhaustion and out-of-range with upstream's messages."""

from __future__ import annotations

import ipaddress

import pytest

from controlplane.controllers.nodeipam.cidrset import (
    NO_CIDRS_REMAINING,
    SUBNET_TOO_BIG,
    CIDRSet,
    CIDRSetError,
)
from controlplane.controllers.nodeipam.controller import pod_cidrs


def net(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text)


def test_allocates_blocks_in_order_skipping_occupied_ones() -> None:
    s = CIDRSet.parse("10.244.0.0/16", 24)
    assert s.max_cidrs == 256
    s.occupy(net("10.244.1.0/24"))
    assert [str(s.allocate_next()) for _ in range(3)] == ["10.244.0.0/24", "10.244.2.0/24", "10.244.3.0/24"]
    assert s.allocated == 4


def test_a_released_block_is_not_reused_before_the_range_wraps() -> None:
    s = CIDRSet.parse("10.1.0.0/22", 24)
    first = s.allocate_next()
    s.release(first)
    assert [str(s.allocate_next()) for _ in range(4)] == [
        "10.1.1.0/24",
        "10.1.2.0/24",
        "10.1.3.0/24",
        "10.1.0.0/24",
    ]
    with pytest.raises(CIDRSetError, match=NO_CIDRS_REMAINING):
        s.allocate_next()


def test_a_larger_range_occupies_every_block_it_covers_and_counts_once() -> None:
    s = CIDRSet.parse("10.244.0.0/16", 24)
    s.occupy(net("10.244.0.0/22"))
    s.occupy(net("10.244.2.0/24"))  # already covered: not counted twice
    assert s.allocated == 4
    assert str(s.allocate_next()) == "10.244.4.0/24"
    s.release(net("10.244.0.0/23"))
    assert s.allocated == 3


def test_out_of_range_and_too_big_node_masks_are_refused_with_upstreams_text() -> None:
    s = CIDRSet.parse("10.244.0.0/16", 24)
    with pytest.raises(
        CIDRSetError, match=r"cidr 10.50.0.0/24 is out the range of cluster cidr 10.244.0.0/16"
    ):
        s.occupy(net("10.50.0.0/24"))
    with pytest.raises(CIDRSetError, match=SUBNET_TOO_BIG):
        CIDRSet.parse("10.244.0.0/16", 8)


def test_pod_cidrs_reads_the_list_or_the_single_field() -> None:
    assert pod_cidrs({"spec": {"podCIDRs": ["10.0.0.0/24"], "podCIDR": "10.0.0.0/24"}}) == ["10.0.0.0/24"]
    assert pod_cidrs({"spec": {"podCIDR": "10.0.1.0/24"}}) == ["10.0.1.0/24"]
    assert pod_cidrs({"spec": {}}) == []
