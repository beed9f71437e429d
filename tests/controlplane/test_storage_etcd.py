"""What only the etcd store has, on a real etcd 3.4 with TLS client certificates: upstream's key layout,
transactions racing between two servers, refusal without the right certificates, an unreachable etcd
failing fast, and progress notifications keeping a watch-fed cache current."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from pathlib import Path

import pytest

from controlplane.storage import (
    ConflictError,
    KeyExistsError,
    StoreRefusedError,
    StoreTooLargeError,
    StoreUnavailableError,
)
from controlplane.storage.cache import GoneError, WatchCache
from controlplane.storage.etcd import EtcdConfig, EtcdStore, parse_servers
from controlplane.storage.etcdkeys import prefix_end
from controlplane.storage.etcdpb import rpc_pb2 as pb
from pykubelet.rig.etcd import Etcd, make_pki
from pykubelet.rig.process import free_port

from .conftest import LAYOUT, etcd_store


@pytest.fixture
async def pair(etcd: Etcd, tmp_path: Path):
    """Two stores on one prefix: two API servers sharing an etcd."""
    prefix = f"/t-{tmp_path.name[-12:]}/"
    a, b = etcd_store(etcd, prefix), etcd_store(etcd, prefix)
    await a.start()
    await b.start()
    yield a, b
    await a.close()
    await b.close()


def test_key_layout_is_upstreams_both_ways() -> None:
    cases = {
        "/pods/default/web": "/registry/pods/default/web",
        "/nodes/n1": "/registry/minions/n1",
        "/services/default/kubernetes": "/registry/services/specs/default/kubernetes",
        "/endpoints/default/kubernetes": "/registry/services/endpoints/default/kubernetes",
        "/replicationcontrollers/ns/rc": "/registry/controllers/ns/rc",
        "/deployments.apps/ns/d": "/registry/deployments/ns/d",
        "/leases.coordination.k8s.io/kube-node-lease/n1": "/registry/leases/kube-node-lease/n1",
        "/clusterroles.rbac.authorization.k8s.io/admin": "/registry/clusterroles/admin",
        "/horizontalpodautoscalers.autoscaling/ns/h": "/registry/horizontalpodautoscalers/ns/h",
        "/apiservices.apiregistration.k8s.io/v1.apps": "/registry/apiregistration.k8s.io/apiservices/v1.apps",
        "/widgets.example.com/ns/w": "/registry/example.com/widgets/ns/w",  # a custom resource
        "/ranges/serviceips": "/registry/ranges/serviceips",  # the store's own records
    }
    for key, etcd_key in cases.items():
        assert LAYOUT.to_etcd(key) == etcd_key
        assert LAYOUT.from_etcd(etcd_key) == key
    assert LAYOUT.to_etcd("/") == "/registry/"
    assert LAYOUT.to_etcd("/services/") == "/registry/services/specs/"
    assert prefix_end(b"/registry/") == b"/registry0"
    with pytest.raises(ValueError, match="not an http"):
        parse_servers("127.0.0.1:2379")
    with pytest.raises(ValueError, match="all http or all https"):
        parse_servers("http://127.0.0.1:2379,https://127.0.0.1:22379")
    assert parse_servers("https://a:2379, https://b:2379") == ("https://a:2379", "https://b:2379")


async def test_keys_land_where_upstream_puts_them(pair: tuple[EtcdStore, EtcdStore]) -> None:
    store, _ = pair
    await store.create("/nodes/n1", b'{"kind":"Node"}')
    await store.create("/services/default/s", b'{"kind":"Service"}')
    low = store.prefix.encode()
    raw = await store.kv.Range(pb.RangeRequest(key=low, range_end=prefix_end(low), keys_only=True))
    assert [kv.key.decode()[len(store.prefix) :] for kv in raw.kvs] == [
        "minions/n1",
        "services/specs/default/s",
    ]


async def test_racing_writes_one_wins_whole(pair: tuple[EtcdStore, EtcdStore]) -> None:
    a, b = pair
    results = await asyncio.gather(
        a.create("/cm/ns/x", b"from-a"), b.create("/cm/ns/x", b"from-b"), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in results) == ["KeyExistsError", "int"]
    kv = await a.get("/cm/ns/x")
    assert kv is not None
    # Both read the same revision, both write with it: etcd's compare lets exactly one through.
    results = await asyncio.gather(
        a.update("/cm/ns/x", b"a2", kv.mod_revision),
        b.update("/cm/ns/x", b"b2", kv.mod_revision),
        return_exceptions=True,
    )
    won = [r for r in results if isinstance(r, int)]
    lost = [r for r in results if isinstance(r, ConflictError)]
    assert len(won) == 1 and len(lost) == 1 and lost[0].actual == won[0]
    now = await b.get("/cm/ns/x")
    assert now is not None and now.mod_revision == won[0]
    assert now.value == (b"a2" if results[0] == won[0] else b"b2")
    with pytest.raises(KeyExistsError):
        await b.create("/cm/ns/x", b"again")


async def test_a_read_modify_write_waits_for_its_own_key_only(pair) -> None:
    """An update reads the cache once it holds this server's last write of that key (read-your-writes
    for a client that writes the same object twice), not every write of every other request in flight;
    a write of the key through another server is learnt from the conflict, and the retry waits for it."""
    a, b = pair
    first = await a.create("/configmaps/ns/one", b'{"metadata":{"name":"one"}}')
    other = await a.create("/configmaps/ns/two", b'{"metadata":{"name":"two"}}')
    assert a.revision == other > first
    # a cache that has applied `first` need not wait for `two` before reading `one`
    assert a.key_revision("/configmaps/ns/one", first) == 0
    assert a.key_revision("/configmaps/ns/two", first) == other
    # nor for its own write once applied
    assert a.key_revision("/configmaps/ns/two", other) == 0
    # b writes `one`; a's stale update conflicts and notes the revision its retry must wait for
    moved = await b.update("/configmaps/ns/one", b'{"metadata":{"name":"one","labels":{"by":"b"}}}', first)
    with pytest.raises(ConflictError):
        await a.update("/configmaps/ns/one", b'{"metadata":{"name":"one","labels":{"by":"a"}}}', first)
    assert a.key_revision("/configmaps/ns/one", other) == moved

    cache = WatchCache(a)
    await cache.start()
    try:
        rev = await a.update("/configmaps/ns/one", b'{"metadata":{"name":"one","labels":{"by":"a2"}}}', moved)
        await cache.wait_fresh("/configmaps/ns/one")
        cached = cache.get("/configmaps/ns/one")
        assert cached is not None and cached.revision == rev
    finally:
        await cache.stop()


async def test_client_certificate_is_required(etcd: Etcd, tmp_path: Path) -> None:
    no_cert = EtcdStore(EtcdConfig((etcd.url,), etcd.pki.ca_cert, dial_timeout=2))
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError, match=f"etcd at {etcd.url} is not reachable"):
        await no_cert.start()
    assert time.monotonic() - started < 5
    # A certificate from another CA is refused too, and so is a server our CA did not sign.
    other = make_pki(tmp_path / "other")
    stranger = EtcdStore(
        EtcdConfig((etcd.url,), etcd.pki.ca_cert, other.client_cert, other.client_key, dial_timeout=2)
    )
    with pytest.raises(StoreUnavailableError, match="etcd refused our client certificate"):
        await stranger.start()
    wrong_ca = EtcdStore(
        EtcdConfig((etcd.url,), other.ca_cert, etcd.pki.client_cert, etcd.pki.client_key, dial_timeout=2)
    )
    with pytest.raises(StoreUnavailableError, match="not signed by --etcd-cafile"):
        await wrong_ca.start()


async def test_unreachable_etcd_fails_within_seconds() -> None:
    url = f"https://127.0.0.1:{free_port()}"
    store = EtcdStore(EtcdConfig((url,), dial_timeout=2))
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as err:
        await store.start()
    assert time.monotonic() - started < 5
    assert url in str(err.value) and "Connection refused" in str(err.value)


async def test_the_first_server_that_answers_is_used(etcd: Etcd, tmp_path: Path) -> None:
    dead = [f"https://127.0.0.1:{free_port()}" for _ in range(2)]
    pki = etcd.pki
    store = EtcdStore(
        EtcdConfig(
            (dead[0], etcd.url),
            pki.ca_cert,
            pki.client_cert,
            pki.client_key,
            prefix=f"/t-{tmp_path.name[-12:]}/",
        )
    )
    await store.start()
    try:
        assert await store.create("/cm/ns/x", b"{}") > 0
    finally:
        await store.close()
    nobody = EtcdStore(EtcdConfig(tuple(dead), pki.ca_cert, pki.client_cert, pki.client_key))
    with pytest.raises(StoreUnavailableError) as err:
        await nobody.start()
    assert all(f"etcd at {url} is not reachable" in str(err.value) for url in dead)


async def test_concurrent_failures_on_one_member_move_once(etcd: Etcd, tmp_path: Path) -> None:
    """Calls that failed together on a dead member fail over once, to the next member, not each one
    member further (which skipped the live member and failed writes that etcd would have taken)."""
    dead = [f"https://127.0.0.1:{free_port()}" for _ in range(2)]
    pki = etcd.pki
    config = EtcdConfig(
        (dead[0], etcd.url, dead[1]),
        pki.ca_cert,
        pki.client_cert,
        pki.client_key,
        prefix=f"/t-{tmp_path.name[-12:]}/",
    )
    store = EtcdStore(config)
    await store.start()
    try:
        await store.create("/cm/ns/x", b"{}")
        store._use(0)  # the member in use dies under it
        got = await asyncio.gather(*(store.get("/cm/ns/x") for _ in range(8)))
        assert all(kv is not None and kv.value == b"{}" for kv in got)
        assert config.servers[store._member] == etcd.url
    finally:
        await store.close()


async def test_a_watch_fed_cache_is_fresh_at_our_revisions_only(etcd: Etcd, tmp_path: Path) -> None:
    """Revisions spent outside the store's prefix (another server's keys, the compactor's key) do not
    make it wait for events that never come; etcd's periodic progress notifications move it on."""
    mine = etcd_store(etcd, f"/t-{tmp_path.name[-12:]}-mine/")
    other = etcd_store(etcd, f"/t-{tmp_path.name[-12:]}-other/")
    await other.start()
    await other.create("/configmaps/ns/first", b"{}")
    await mine.start()
    cache = WatchCache(mine)
    await cache.start()
    try:
        rev = await mine.create("/configmaps/ns/a", b'{"metadata":{"name":"a"}}')
        await cache.wait_for(rev)
        await other.create("/configmaps/ns/b", b"{}")
        await mine.compact(rev)
        await mine.get("/configmaps/ns/a")
        started = time.monotonic()
        await cache.wait_fresh()
        assert time.monotonic() - started < 0.5
        # A list "now" is served at a revision the cache has reached, so a watch from it starts at once.
        _, served, _ = await mine.list("/configmaps/", limit=1)
        assert served == mine.revision <= cache.revision
        # The session's etcd notifies progress every second: the cache's revision passes the others'.
        deadline = time.monotonic() + 5
        while cache.revision <= rev + 1:
            assert time.monotonic() < deadline, "no progress notification"
            await asyncio.sleep(0.1)
        assert cache.get("/configmaps/ns/b") is None
    finally:
        await cache.stop()
        await mine.close()
        await other.close()


async def test_a_cache_behind_a_compaction_relists(etcd: Etcd, tmp_path: Path) -> None:
    """A watch-fed cache whose watch comes back after a compaction passed it (etcd away for longer than
    a round) relists: its state is the store's again, watchers are closed to resume (and get 410), and
    in-process subscribers are told what changed."""
    store = etcd_store(etcd, f"/t-{tmp_path.name[-12:]}/")
    await store.start()
    cache = WatchCache(store)
    await cache.start()
    try:
        x = await store.create("/configmaps/ns/x", b'{"metadata":{"name":"x"}}')
        y = await store.create("/configmaps/ns/y", b'{"metadata":{"name":"y"}}')
        await cache.wait_for(y)
        seen: list[tuple[str, str]] = []
        cache.subscribe("configmaps", lambda e: seen.append((e.type, e.obj.key)))
        watcher = cache.watch("configmaps", "/configmaps/", None, y)
        # The feed goes away; meanwhile x changes, y goes, z comes, and history is compacted past it all.
        assert cache._task is not None
        cache._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await cache._task
        await store.update("/configmaps/ns/x", b'{"metadata":{"name":"x"},"data":{"a":"1"}}', x)
        await store.delete("/configmaps/ns/y", y)
        z = await store.create("/configmaps/ns/z", b'{"metadata":{"name":"z"}}')
        await store.compact(z)
        cache._task = asyncio.create_task(cache._feed(y))
        await cache.wait_for(z, patience=5)
        assert [c.key for c in cache.list("configmaps", "/configmaps/")] == [
            "/configmaps/ns/x",
            "/configmaps/ns/z",
        ]
        assert cache.get("/configmaps/ns/x").obj["data"] == {"a": "1"}  # type: ignore[union-attr]
        assert sorted(seen) == [
            ("ADDED", "/configmaps/ns/z"),
            ("DELETED", "/configmaps/ns/y"),
            ("MODIFIED", "/configmaps/ns/x"),
        ]
        assert watcher.closed
        with pytest.raises(GoneError):
            cache.watch("configmaps", "/configmaps/", None, y)
        # And the feed goes on from the relist.
        w = await store.create("/configmaps/ns/w", b'{"metadata":{"name":"w"}}')
        await cache.wait_for(w)
        assert cache.get("/configmaps/ns/w") is not None
    finally:
        await cache.stop()
        await store.close()


async def test_current_revision_and_the_unchanged_check_for_revisions_spent_elsewhere(pair) -> None:
    """What consistent reads across API servers stand on: `current_revision` covers a write made through
    another store at once (a linearizable read), and `live_count_if_unchanged` tells a revision spent
    outside the prefix (nothing under it changed: the live count) from one that changed a key (None)
    or deleted one (a lower count than the reader held)."""
    a, b = pair
    await a.create("/configmaps/ns/one", b'{"n":1}')
    written = await a.create("/configmaps/ns/two", b'{"n":2}')
    assert await b.current_revision() >= written
    # Many readers at once share the etcd round trips and all get a revision covering the write.
    revisions = await asyncio.gather(*(b.current_revision() for _ in range(20)))
    assert min(revisions) >= written
    held = written
    foreign = (await a.kv.Put(pb.PutRequest(key=f"/elsewhere-{id(a)}".encode(), value=b"x"))).header.revision
    assert foreign > held
    assert await b.live_count_if_unchanged(held, foreign) == 2
    kvs, _, _ = await a.list("/configmaps/ns/")
    updated = await a.update("/configmaps/ns/one", b'{"n":3}', kvs[0].mod_revision)
    assert await b.live_count_if_unchanged(held, updated) is None
    live_one = next(kv for kv in (await a.list("/configmaps/ns/"))[0] if kv.key.endswith("/one"))
    deleted = await a.delete("/configmaps/ns/one", live_one.mod_revision)
    # Since `updated`, only a deletion: no live key is newer, but the count is one lower than held then.
    assert await b.live_count_if_unchanged(updated, deleted) == 1


async def test_etcds_refusals_keep_etcds_words(etcd: Etcd, tmp_path: Path) -> None:
    """A transaction over etcd's Go client's 2 MiB send limit never leaves the client (its gRPC status
        text, as kube-apiserver's clients see it), and past --quota-backend-bytes etcd raises its NOSPACE alarm:
        `etcdserver: mvcc: database space exceeded` for every write (the one that crossed the quota is applied
    and refused, as etcd's quota applier does), reads and deletes still served."""
    store = etcd_store(etcd, f"/t-{tmp_path.name[-12:]}/")
    await store.start()
    try:
        with pytest.raises(StoreTooLargeError) as err:
            await store.create("/configmaps/ns/huge", b"x" * 2_500_000)
        sent = re.fullmatch(
            r"rpc error: code = ResourceExhausted desc = trying to send message larger than max "
            r"\((\d+) vs\. 2097152\)",
            err.value.backend_message,
        )
        assert sent is not None and 2_500_000 < int(sent[1]) < 2_500_300  # the value, key and framing
    finally:
        await store.close()
    with Etcd(tmp_path / "small", quota_backend_bytes=1024 * 1024) as small:
        pki = small.pki
        full = EtcdStore(EtcdConfig((small.url,), pki.ca_cert, pki.client_cert, pki.client_key), LAYOUT)
        await full.start()
        try:
            written = 0
            with pytest.raises(StoreRefusedError) as refused:
                for written in range(100):  # a 1 MiB quota holds about ten of these
                    await full.create(f"/configmaps/ns/c{written}", b"x" * 100_000)
            assert refused.value.backend_message == "etcdserver: mvcc: database space exceeded"
            assert not isinstance(refused.value, StoreTooLargeError) and 0 < written < 100
            # The alarm is raised: every write after it is refused, however small.
            with pytest.raises(StoreRefusedError, match="database space exceeded"):
                await full.create("/configmaps/ns/small", b"x")
            assert await full.get("/configmaps/ns/small") is None
            assert await full.get("/configmaps/ns/c0") is not None
            await full.delete("/configmaps/ns/c0", 0)
        finally:
            await full.close()
