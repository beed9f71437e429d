"""Service cluster IPs and node ports through the real API server, as upstream's allocators hand them
out: a value another Service holds is refused with upstream's 422 text on create and on update (a port
added, a type change), a value comes free when its Service is deleted or changes type, and the shared
allocation record is rebuilt from the Services when it is missing."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from controlplane.apiserver import serviceallocator
from controlplane.apiserver.serviceallocator import Holder, RangeAllocator, Request, Taken
from controlplane.storage.sqlite import SQLiteStore
from tests.controlplane.conftest import message

pytestmark = pytest.mark.integration  # a real API server process

# Node ports this module names (the session server's range is upstream's default, 30000-32767).
PORT_A, PORT_B = 31911, 31912


def service(name: str, kind: str = "NodePort", node_port: int | None = None, **spec: Any) -> dict[str, Any]:
    port: dict[str, Any] = {"port": 80}
    if node_port:
        port["nodePort"] = node_port
    return {"metadata": {"name": name}, "spec": {"type": kind, "ports": [port], **spec}}


def free_ip(v1: client.CoreV1Api) -> str:
    """An address of the server's service range that no Service holds, from the pinned low part."""
    base = ipaddress.ip_address(v1.read_namespaced_service("kubernetes", "default").spec.cluster_ip)
    used = {s.spec.cluster_ip for s in v1.list_service_for_all_namespaces().items}
    for offset in range(2, 10):
        candidate = str(base + offset)
        if candidate not in used:
            return candidate
    raise AssertionError("no pinned address free")


def test_duplicate_node_port_refused_on_create(v1: client.CoreV1Api, namespace: str) -> None:
    v1.create_namespaced_service(namespace, service("first", node_port=PORT_A))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, service("second", node_port=PORT_A))
    assert message(err) == (
        f'Service "second" is invalid: spec.ports[0].nodePort: Invalid value: {PORT_A}: '
        "provided port is already allocated"
    )
    cause = json.loads(err.value.body)["details"]["causes"][0]
    assert cause["field"] == "spec.ports[0].nodePort"
    # a LoadBalancer naming it is refused as well, and so is a dry run
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, service("lb", "LoadBalancer", PORT_A), dry_run="All")
    assert "provided port is already allocated" in message(err)
    v1.delete_namespaced_service("first", namespace)


def test_duplicate_cluster_ip_refused_on_create(v1: client.CoreV1Api, namespace: str) -> None:
    ip = free_ip(v1)
    v1.create_namespaced_service(namespace, service("first", "ClusterIP", cluster_ip=ip))
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, service("second", "ClusterIP", cluster_ip=ip))
    assert message(err) == (
        f'Service "second" is invalid: spec.clusterIPs: Invalid value: ["{ip}"]: '
        f"failed to allocate IP {ip}: provided IP is already allocated"
    )
    v1.delete_namespaced_service("first", namespace)


def test_refusals_on_update(v1: client.CoreV1Api, namespace: str) -> None:
    """A port added by an update, and a type change to NodePort, may not take a port in use; the
    Service keeps what it had."""
    v1.create_namespaced_service(namespace, service("holder", node_port=PORT_A))
    v1.create_namespaced_service(namespace, service("other", node_port=PORT_B))
    added = {
        "spec": {
            "ports": [
                {"name": "a", "port": 80, "nodePort": PORT_B},
                {"name": "b", "port": 81, "nodePort": PORT_A},
            ]
        }
    }
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_service("other", namespace, added)
    assert message(err) == (
        f'Service "other" is invalid: spec.ports[1].nodePort: Invalid value: {PORT_A}: '
        "provided port is already allocated"
    )
    v1.create_namespaced_service(namespace, service("plain", "ClusterIP"))
    with pytest.raises(ApiException) as err:
        v1.patch_namespaced_service(
            "plain", namespace, {"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": PORT_A}]}}
        )
    assert "spec.ports[0].nodePort: Invalid value: 31911: provided port is already allocated" in message(err)
    # the refused update released nothing: the other Service's port is still its own
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, service("third", node_port=PORT_B))
    assert "provided port is already allocated" in message(err)
    # an update that keeps its own port is fine
    v1.patch_namespaced_service("holder", namespace, {"metadata": {"labels": {"touched": "yes"}}})
    for name in ("holder", "other", "plain"):
        v1.delete_namespaced_service(name, namespace)


def test_released_on_delete(v1: client.CoreV1Api, namespace: str) -> None:
    ip = free_ip(v1)
    v1.create_namespaced_service(namespace, service("once", node_port=PORT_A, cluster_ip=ip))
    v1.delete_namespaced_service("once", namespace)
    again = v1.create_namespaced_service(namespace, service("twice", node_port=PORT_A, cluster_ip=ip))
    assert again.spec.cluster_ip == ip and again.spec.ports[0].node_port == PORT_A
    v1.delete_namespaced_service("twice", namespace)


def test_released_on_type_change(v1: client.CoreV1Api, namespace: str) -> None:
    """NodePort -> ClusterIP gives back the node port; -> ExternalName the cluster IP too; a dynamic
    allocation is then unique against the kept ones."""
    ip = free_ip(v1)
    v1.create_namespaced_service(namespace, service("mover", node_port=PORT_A, cluster_ip=ip))
    to_cluster_ip = {"spec": {"type": "ClusterIP", "ports": [{"port": 80, "nodePort": None}]}}
    moved = v1.patch_namespaced_service("mover", namespace, to_cluster_ip)
    assert moved.spec.ports[0].node_port is None and moved.spec.cluster_ip == ip
    taker = v1.create_namespaced_service(namespace, service("port-taker", node_port=PORT_A))
    assert taker.spec.ports[0].node_port == PORT_A
    with pytest.raises(ApiException) as err:
        v1.create_namespaced_service(namespace, service("ip-taker", "ClusterIP", cluster_ip=ip))
    assert "provided IP is already allocated" in message(err)
    to_external = {
        "spec": {"type": "ExternalName", "externalName": "example.com", "clusterIP": None, "clusterIPs": None}
    }
    external = v1.patch_namespaced_service("mover", namespace, to_external)
    assert external.spec.cluster_ip is None
    ip_taker = v1.create_namespaced_service(namespace, service("ip-taker", "ClusterIP", cluster_ip=ip))
    assert ip_taker.spec.cluster_ip == ip
    for name in ("mover", "port-taker", "ip-taker"):
        v1.delete_namespaced_service(name, namespace)


def test_dynamic_allocations_unique(v1: client.CoreV1Api, namespace: str) -> None:
    made = [v1.create_namespaced_service(namespace, service(f"dyn-{i}")) for i in range(6)]
    ips = [s.spec.cluster_ip for s in made]
    ports = [s.spec.ports[0].node_port for s in made]
    assert len(set(ips)) == 6 and len(set(ports)) == 6
    everyone = v1.list_service_for_all_namespaces().items
    all_ips = [s.spec.cluster_ip for s in everyone if s.spec.cluster_ip not in (None, "None")]
    assert len(all_ips) == len(set(all_ips))
    for s in made:
        v1.delete_namespaced_service(s.metadata.name, namespace)


# --- the record itself, on a real store --------------------------------------------------------------


def _port_allocator(store: SQLiteStore) -> RangeAllocator:
    ports = range(30000, 30010)
    return RangeAllocator(
        store,
        serviceallocator.PORTS_KEY,
        "30000-30009",
        len(ports),
        lambda index: str(ports[index]),
        serviceallocator.service_ports,
        lambda v: v.isdigit() and int(v) in ports,
    )


def _stored_service(name: str, uid: str, node_port: int) -> bytes:
    body = {
        "metadata": {"name": name, "uid": uid},
        "spec": {"type": "NodePort", "ports": [{"nodePort": node_port}]},
    }
    return json.dumps(body).encode()


def on_store(
    path: Path, body: Callable[[Any], Awaitable[None]], kind: type[SQLiteStore] = SQLiteStore
) -> None:
    """body(store) on a started SQLite store under `path`, closed afterwards."""

    async def run() -> None:
        store = kind(path / "state.db")
        await store.start()
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(run())


def test_record_rebuilt_from_services_and_leaks_taken_over(tmp_path: Path) -> None:
    async def run(store: SQLiteStore) -> None:
        await store.create("/services/ns/old", _stored_service("old", "u-old", 30000))
        allocator = _port_allocator(store)
        me = Holder(str(uuid.uuid4()), "ns/new", 0.0)
        # no record yet: rebuilt from the stored Service, whose port is then not free
        with pytest.raises(Taken) as taken:
            await allocator.take(Request(me, ["30000"]))
        assert taken.value.owner == "ns/old"
        assert await allocator.take(Request(me, [], 2)) == ["30001", "30002"]
        assert set(await allocator.holders()) == {"30000", "30001", "30002"}
        # a Service gone without its release (a crash): its entry, older than the grace, is a leak
        await store.delete("/services/ns/old", 0)
        assert await allocator.take(Request(me, ["30000"])) == []
        # release gives back only the owner's own entries
        await allocator.release("someone-else", ["30001"])
        await allocator.release(me.uid, ["30001", "30002"])
        assert set(await allocator.holders()) == {"30000"}

    on_store(tmp_path, run)


def test_concurrent_takes_on_one_store_never_share(tmp_path: Path) -> None:
    """Many allocators (as many API servers) racing on one record: every value once."""

    async def run(store: SQLiteStore) -> None:
        allocators = [_port_allocator(store) for _ in range(4)]
        results = await asyncio.gather(
            *(a.take(Request(Holder(f"u{i}", f"ns/s{i}", 1e12), [], 2)) for i, a in enumerate(allocators))
        )
        values = [v for r in results for v in r]
        assert len(values) == 8 and len(set(values)) == 8
        with pytest.raises(serviceallocator.Full):
            await allocators[0].take(Request(Holder("u9", "ns/s9", 1e12), [], 3))

    on_store(tmp_path, run)


def test_an_older_record_holding_its_owners_is_moved_into_value_keys(tmp_path: Path) -> None:
    """A store written when one record held every owner: its owners become value keys, kept as held."""

    async def run(store: SQLiteStore) -> None:
        older = {
            "kind": "RangeAllocation",
            "range": "30000-30009",
            "owners": {"30003": ["u-a", "ns/a", 1e12], "30005": ["u-b", "ns/b", 1e12]},
        }
        await store.create(serviceallocator.PORTS_KEY, json.dumps(older).encode())
        allocator = _port_allocator(store)
        # a release first (the Service holding 30003 deleted): the move comes before it
        await allocator.release("u-a", ["30003"])
        me = Holder("u-me", "ns/me", 1e12)
        with pytest.raises(Taken) as taken:
            await allocator.take(Request(me, ["30005"]))
        assert taken.value.owner == "ns/b"
        assert await allocator.take(Request(me, [], 4)) == ["30000", "30001", "30002", "30003"]
        held = await allocator.holders()
        assert {v: h.name for v, h in held.items() if h.name != "ns/me"} == {"30005": "ns/b"}
        record = serviceallocator.Record.decode((await store.get(serviceallocator.PORTS_KEY)).value)
        assert record.range == "30000-30009" and record.owners is None

    on_store(tmp_path, run)


def test_a_failed_take_keeps_nothing(tmp_path: Path) -> None:
    """Named values taken before a refusal, or new ones before the range ran out, are given back."""

    async def run(store: SQLiteStore) -> None:
        allocator = _port_allocator(store)
        other = Holder("u-other", "ns/other", 1e12)
        me = Holder("u-me", "ns/me", 1e12)
        await allocator.take(Request(other, ["30002"], 6))
        with pytest.raises(Taken):
            await allocator.take(Request(me, ["30009", "30002"]))
        with pytest.raises(serviceallocator.Full):
            await allocator.take(Request(me, [], 4))
        assert {h.name for h in (await allocator.holders()).values()} == {"ns/other"}
        assert len(await allocator.holders()) == 7

    on_store(tmp_path, run)


def test_a_take_reads_and_writes_the_same_whatever_is_stored(tmp_path: Path) -> None:
    """The cost of a take does not grow with the values taken: the store calls, and the bytes read and
    written, of the 10th and of the 2 000th cluster IP are the same (one record holding every owner, read
    and written whole, made each create cost more with every Service: issue 36)."""

    class Counting(SQLiteStore):
        calls = 0
        moved = 0  # bytes read and written

        async def get(self, key: str) -> Any:
            Counting.calls += 1
            kv = await super().get(key)
            Counting.moved += len(kv.value) if kv is not None else 0
            return kv

        async def create(self, key: str, value: bytes) -> int:
            Counting.calls += 1
            Counting.moved += len(value)
            return await super().create(key, value)

        async def update(self, key: str, value: bytes, expected_revision: int) -> int:
            Counting.calls += 1
            Counting.moved += len(value)
            return await super().update(key, value, expected_revision)

        async def list(self, *args: Any, **kwargs: Any) -> Any:
            Counting.calls += 1
            items, revision, more = await super().list(*args, **kwargs)
            Counting.moved += sum(len(kv.value) for kv in items)
            return items, revision, more

    async def run(store: SQLiteStore) -> None:
        net = ipaddress.ip_network("10.96.0.0/16")

        def ip_allocator() -> RangeAllocator:
            return RangeAllocator(
                store,
                serviceallocator.IPS_KEY,
                str(net),
                net.num_addresses - 12,
                lambda index: str(net.network_address + 10 + index),
                serviceallocator.service_ips,
                lambda value: ipaddress.ip_address(value) in net,
            )

        allocator = ip_allocator()
        costs = {}
        for n in range(2000):
            before = (Counting.calls, Counting.moved)
            await allocator.take(Request(Holder(f"u{n:04d}", f"ns/s{n:04d}", 1e12), [], 1))
            costs[n] = (Counting.calls - before[0], Counting.moved - before[1])
        assert costs[1999] == costs[10], (costs[10], costs[1999])
        assert len(await allocator.holders()) == 2000
        # a restarted server: one read of the taken values, not a create tried on each of them
        restarted, before = ip_allocator(), Counting.calls
        assert await restarted.take(Request(Holder("u-new", "ns/new", 1e12), [], 1)) == [
            str(net.network_address + 10 + 2000)
        ]
        assert Counting.calls - before <= 10, Counting.calls - before

    on_store(tmp_path, run, Counting)
