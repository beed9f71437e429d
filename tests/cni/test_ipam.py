"""host-local semantics of the IPAM store, on a real file system (no root needed)."""

from __future__ import annotations

import ipaddress
import multiprocessing
from pathlib import Path

import pytest

from agent.cni.errors import CniError
from agent.cni.ipam import HostLocalStore
from agent.cni.netconf import IPRange, parse_netconf


def small_range(subnet: str = "10.3.0.0/29", **kw: str) -> list[IPRange]:
    import json

    r = {"subnet": subnet, **kw}
    nc = parse_netconf(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "t", "ipam": {"ranges": [[r]]}})
    )
    return nc.ranges


def test_files_and_marker_match_host_local(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    a = store.allocate("cid-a", "eth0", small_range())
    assert str(a.ip) == "10.3.0.2"  # .1 is the gateway
    assert str(a.interface) == "10.3.0.2/29"
    assert (tmp_path / "net" / "10.3.0.2").read_bytes() == b"cid-a\r\neth0"
    assert (tmp_path / "net" / "last_reserved_ip.0").read_text() == "10.3.0.2"
    assert (tmp_path / "net" / "lock").exists()


def test_round_robin_skips_gateway_and_wraps(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    ranges = small_range()  # usable .1-.6, gateway .1 -> .2 .3 .4 .5 .6
    ips = [str(store.allocate(f"c{i}", "eth0", ranges).ip) for i in range(5)]
    assert ips == ["10.3.0.2", "10.3.0.3", "10.3.0.4", "10.3.0.5", "10.3.0.6"]
    with pytest.raises(CniError, match="no IP addresses available"):
        store.allocate("c9", "eth0", ranges)
    assert store.release("c2", "eth0") == [ipaddress.IPv4Address("10.3.0.4")]
    # the next allocation continues after the last reserved (.6), wraps and finds .4
    assert str(store.allocate("c10", "eth0", ranges).ip) == "10.3.0.4"


def test_released_ip_not_reused_immediately(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    ranges = small_range("10.3.0.0/28")
    first = store.allocate("a", "eth0", ranges).ip
    store.release("a", "eth0")
    assert store.allocate("b", "eth0", ranges).ip != first


def test_second_allocation_for_same_id_and_ifname_fails(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    store.allocate("a", "eth0", small_range())
    with pytest.raises(CniError, match="duplicate allocation"):
        store.allocate("a", "eth0", small_range())
    # another interface of the same container is a different attachment
    assert store.allocate("a", "net1", small_range()).ip


def test_release_is_idempotent_and_survives_new_instances(tmp_path: Path) -> None:
    HostLocalStore(tmp_path, "net").allocate("a", "eth0", small_range())
    reopened = HostLocalStore(tmp_path, "net")  # a restarted service sees the same allocations
    assert reopened.find("a", "eth0") == [ipaddress.IPv4Address("10.3.0.2")]
    assert reopened.release("a", "eth0")
    assert reopened.release("a", "eth0") == []
    assert reopened.release("never", "eth0") == []


def test_range_start_end(tmp_path: Path) -> None:
    ranges = small_range("10.4.0.0/24", rangeStart="10.4.0.100", rangeEnd="10.4.0.101")
    store = HostLocalStore(tmp_path, "net")
    assert [str(store.allocate(c, "eth0", ranges).ip) for c in "ab"] == ["10.4.0.100", "10.4.0.101"]


def test_gc_keeps_only_valid(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    for c in "abc":
        store.allocate(c, "eth0", small_range())
    freed = store.gc({("b", "eth0")})
    assert sorted(cid for _, cid, _ in freed) == ["a", "c"]
    assert [owner for owner in store.entries().values()] == [("b", "eth0")]


def _allocate_many(args: tuple[str, int]) -> list[str]:
    data_dir, worker = args
    ranges = small_range("10.5.0.0/24")
    store = HostLocalStore(data_dir, "net")
    return [str(store.allocate(f"w{worker}-{i}", "eth0", ranges).ip) for i in range(20)]


def test_concurrent_processes_never_share_an_ip(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(6) as pool:
        results = pool.map(_allocate_many, [(str(tmp_path), w) for w in range(6)])
    ips = [ip for chunk in results for ip in chunk]
    assert len(ips) == 120 and len(set(ips)) == 120
    assert len(HostLocalStore(tmp_path, "net").entries()) == 120


def test_release_hint_is_verified(tmp_path: Path) -> None:
    store = HostLocalStore(tmp_path, "net")
    a = store.allocate("a", "eth0", small_range()).ip
    b = store.allocate("b", "eth0", small_range()).ip
    # a stale or wrong prevResult must never free someone else's address
    assert store.release("a", "eth0", hint=[b]) == [a]
    assert store.find("b", "eth0") == [b]
    assert store.release("b", "eth0", hint=[b]) == [b]
    assert store.entries() == {}


def test_order_over_several_ranges(tmp_path: Path) -> None:
    import json

    raw = [{"subnet": "10.6.0.0/30"}, {"subnet": "10.6.1.0/30"}]  # one usable IP each (.1 is the gateway)
    nc = parse_netconf(
        json.dumps({"cniVersion": "1.0.0", "name": "n", "type": "t", "ipam": {"ranges": [raw]}})
    )
    store = HostLocalStore(tmp_path, "net")
    assert [str(store.allocate(c, "eth0", nc.ranges).ip) for c in "ab"] == ["10.6.0.2", "10.6.1.2"]
    store.release("a", "eth0")
    assert str(store.allocate("c", "eth0", nc.ranges).ip) == "10.6.0.2"  # wrapped to the first range
    assert store.free_count(nc.ranges) == 0


def test_large_range_allocates_lazily(tmp_path: Path) -> None:
    ranges = small_range("10.7.0.0/16")
    store = HostLocalStore(tmp_path, "net")
    assert str(store.allocate("a", "eth0", ranges).ip) == "10.7.0.2"
    assert store.free_count(ranges) == 65533 - 1
