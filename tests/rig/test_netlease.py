"""Network leases: each session's bridge and pod CIDR are its own on the host."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import uuid

import pytest

from pykubelet.rig.netlease import POOL, lease_cluster_network, lease_network, loopback_for


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: lock files in /run, links")


def test_leases_held_at_once_differ_and_never_touch() -> None:
    with lease_network("q") as a, lease_network("q") as b:
        nets = [ipaddress.IPv4Network(x.pod_cidr) for x in (a, b)]
        assert a.bridge != b.bridge and all(n.subnet_of(POOL) and n.prefixlen == 24 for n in nets)
        # not adjacent: nftables would merge adjacent ranges in one set interval
        assert abs(int(nets[0].network_address) - int(nets[1].network_address)) > 256
        assert len(a.bridge) <= 15 and len(b.bridge) <= 15  # IFNAMSIZ


def test_a_range_the_host_routes_is_never_leased() -> None:
    with lease_network("q") as first:
        taken = first.pod_cidr
    link = f"pykr{uuid.uuid4().hex[:6]}"
    gateway = ipaddress.IPv4Network(taken).network_address + 1
    subprocess.run(["ip", "link", "add", link, "type", "bridge"], check=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{gateway}/24", "dev", link], check=True)
        subprocess.run(["ip", "link", "set", link, "up"], check=True)
        with lease_network("q") as again:
            assert again.pod_cidr != taken  # a crashed session's bridge still routes it
    finally:
        subprocess.run(["ip", "link", "del", link], check=False)
    with lease_network("q") as after:
        assert after.pod_cidr == taken  # free again once nothing routes it and nobody holds it


def test_each_lease_implies_a_loopback_address_of_its_own() -> None:
    """The stacks' ingress addresses: as unique as the leases, and bindable with no configuration."""
    with lease_network("q") as a, lease_network("q") as b, lease_cluster_network("q") as c:
        addresses = [loopback_for(x.pod_cidr) for x in (a, b, c)]
        assert len(set(addresses)) == 3 and all(x and x.startswith("127.") for x in addresses), addresses
        assert loopback_for(a.pod_cidr, 2) not in addresses
        for address in addresses:
            with socket.socket() as held:
                held.bind((address, 0))
                held.listen()
                assert socket.create_connection(held.getsockname(), timeout=5).close() is None
    assert loopback_for("10.244.0.0/16") is None  # not a leased range: `up`'s node address stays
