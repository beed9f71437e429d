"""etcd backend: the `Store` interface on etcd's v3 gRPC API (grpc.aio, etcd 3.4 as Debian ships it).

It is the same model as the SQLite log seen from above, because etcd is that log: one revision counter,
resourceVersion = the key's mod_revision, and every write a transaction that compares the mod_revision
the caller read (kube-apiserver's optimistic concurrency), so a write either applies whole or not at
all. Lists at a revision with a limit page through etcd's MVCC history; one etcd watch over the
`/registry/` range feeds the watch cache (the cache orders all resources by one revision, so it wants
one ordered stream); history is compacted as kube-apiserver's compactor does it, coordinated through
`compact_rev_key` so that several API servers on one etcd compact once per round.

Values are the objects' JSON (what the SQLite store keeps). kube-apiserver writes its protobuf envelope
(`k8s\\x00` + runtime.Unknown) for built-in kinds, but its storage decoder recognizes JSON too (as with
`--storage-media-type=application/json`), our server has no protobuf encoder, and JSON stays readable
with etcdctl; so JSON it is.

Failures are typed: etcd unreachable or timing out is `StoreUnavailableError` (a retryable 5xx above),
a value over etcd's request limit is `StoreTooLargeError` and a write past etcd's database quota
`StoreRefusedError` (both a 500 with etcd's words above, as upstream answers), a compacted revision
`CompactedError` (410). A lost watch stream is re-established from the last revision it delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc

from controlplane.storage.etcdkeys import PREFIX, KeyLayout, normal_prefix, prefix_end
from controlplane.storage.etcdpb import rpc_pb2 as pb
from controlplane.storage.etcdpb import rpc_pb2_grpc as pb_grpc
from controlplane.storage.interface import (
    NO_SPACE,
    TOO_LARGE,
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    KeyValue,
    NotFoundError,
    StoreError,
    StoreRefusedError,
    StoreTooLargeError,
    StoreUnavailableError,
)

log = logging.getLogger("controlplane.storage.etcd")

# kube-apiserver's compactor keeps its round counter in this key (outside /registry/), so that of several
# API servers only the one whose transaction wins compacts.
COMPACT_KEY = b"compact_rev_key"
_UNAVAILABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
# A watch stream that broke below the RPC ("Stream removed", a TLS frame that failed to unwrap): the
# transport's fault, not the request's, so the watch is opened again as for an unavailable member
# (etcd's own client retries every watch error except a compacted or cancelled start).
_STREAM_BROKEN = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
_COMPACTED = "required revision has been compacted"
_FUTURE = "required revision is a future revision"
# gRPC's words for a connection that was never made (so a request was never sent).
_NOT_SENT = ("failed to connect", "Connection refused", "connections to all backends failing")
_WATCH_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0)
# How many keys' last written revisions are kept before those the cache has applied are dropped.
_KEY_REVISIONS_KEPT = 10_000
# etcd's Go client sends at most 2 MiB in one request (clientv3's defaultMaxCallSendMsgSize), as
# kube-apiserver's does: a larger transaction never reaches etcd.
MAX_SEND_BYTES = 2 * 1024 * 1024
# gRPC's words for a message over a limit, on either side: "... larger than max (2200000 vs. 2097152)".
_OVER_MAX = re.compile(r"larger than max \((\d+) vs\. (\d+)\)")


@dataclass(frozen=True)
class EtcdConfig:
    """What `--etcd-servers`, `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile` say."""

    servers: tuple[str, ...]
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    prefix: str = PREFIX  # --etcd-prefix: every key lives under it
    dial_timeout: float = 5.0  # the first contact at start: fail within seconds, naming the address
    request_timeout: float = 10.0

    @property
    def secure(self) -> bool:
        return urlsplit(self.servers[0]).scheme == "https"

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(read(self.ca_file), read(self.key_file), read(self.cert_file))


def _channel(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    # Unlimited receive size: a list of the whole keyspace (the watch cache's start) can be large.
    # Reconnect within about a second of a member coming back (gRPC's default backoff grows to 120 s).
    options = [
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_send_message_length", MAX_SEND_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    if credentials is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, credentials, options=options)


def _range_op(key: bytes) -> pb.RequestOp:
    return pb.RequestOp(request_range=pb.RangeRequest(key=key))


def _translate(err: grpc.aio.AioRpcError, what: str) -> StoreError:
    details = err.details() or ""
    if TOO_LARGE in details:
        return StoreTooLargeError(TOO_LARGE, what)
    if NO_SPACE in details:
        return StoreRefusedError(NO_SPACE, what)
    sizes = _OVER_MAX.search(details)
    if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and sizes:
        # Over the client's own send limit (or etcd's gRPC receive limit): etcd's Go client refuses the
        # request before sending it, and its status error reaches kube-apiserver's clients as it is.
        message = f"rpc error: code = ResourceExhausted desc = trying to send message larger than max ({sizes[1]} vs. {MAX_SEND_BYTES})"
        return StoreTooLargeError(message, what)
    if err.code() in _UNAVAILABLE or "etcdserver:" in details:
        own = details if details.startswith("etcdserver:") else ""
        return StoreUnavailableError(f"etcd {what}: {err.code().name}: {details}", own)
    return StoreError(f"etcd {what}: {err.code().name}: {details}")


# What gRPC's TLS failures mean in a user's words (its own text follows in the message).
_TLS_HINTS = (
    (
        ("Unwrap failed", "BAD_CERTIFICATE"),
        "etcd refused our client certificate (--etcd-certfile/--etcd-keyfile)",
    ),
    (
        ("certificate signature failure", "CERTIFICATE_VERIFY_FAILED", "unable to get local issuer"),
        "etcd's serving certificate is not signed by --etcd-cafile",
    ),
)


def _start_cause(err: grpc.aio.AioRpcError, dial_timeout: float) -> str:
    details = err.details() or err.code().name
    if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {dial_timeout:g} s"
    for needles, hint in _TLS_HINTS:
        if any(n in details for n in needles):
            return f"{hint}: {details}"
    return details


class EtcdStore:
    """`Store` on etcd. One channel; every key under /registry/ in upstream's layout (etcdkeys.py), as the
    API server's kinds name it (`layout`)."""

    def __init__(self, config: EtcdConfig, layout: KeyLayout | None = None) -> None:
        if not config.servers:
            raise ValueError("at least one etcd server is needed")
        self.config = config
        self.layout = layout or KeyLayout()
        self.prefix = normal_prefix(config.prefix)
        self._channel: grpc.aio.Channel | None = None
        self._kv: pb_grpc.KVStub | None = None
        self._watch: pb_grpc.WatchStub | None = None
        self._lease: pb_grpc.LeaseStub | None = None
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._member = 0
        self._credentials: grpc.ChannelCredentials | None = None
        self._revision = 0
        self._compacted = 0
        # key -> the newest revision of it this server wrote, or a failed write found there
        self._key_revisions: dict[str, int] = {}
        self._compact_version = 0  # compact_rev_key's version: the compactor's round counter
        # Consistent reads share etcd round trips: callers arriving while one is in flight wait for the
        # next, which starts after them (an earlier one may have been answered before their write).
        self._next_revision: asyncio.Future[int] | None = None
        self._revision_round: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to the first of the servers that answers (in the order given); fail within seconds,
        naming each address and why, when none does. Once connected, a member that cannot be reached
        is left for the next one (`_failover`), as etcd's own client balances over its endpoints."""
        credentials = await asyncio.to_thread(self.config.credentials) if self.config.secure else None
        self._credentials = credentials
        causes = []
        for index, server in enumerate(self.config.servers):
            channel = _channel(urlsplit(server).netloc, credentials)
            try:
                status = await pb_grpc.MaintenanceStub(channel).Status(
                    pb.StatusRequest(), timeout=self.config.dial_timeout
                )
                got = await pb_grpc.KVStub(channel).Range(
                    pb.RangeRequest(key=COMPACT_KEY), timeout=self.config.request_timeout
                )
            except grpc.aio.AioRpcError as err:
                await channel.close()
                causes.append(
                    f"etcd at {server} is not reachable: {_start_cause(err, self.config.dial_timeout)}"
                )
                continue
            self._channels[index] = channel
            self._use(index)
            where = server
            break
        else:
            raise StoreUnavailableError("; ".join(causes))
        # The revision to be fresh at is the newest change under our prefix, not etcd's newest revision:
        # that may have been spent elsewhere (compact_rev_key, another prefix) and would never come
        # through the watch. Deletions after the newest live key arrive by the watch's replay.
        low = self.prefix.encode()
        newest = await self._newest_under(low)
        self._seen(max(newest, int(got.kvs[0].value or 0) if got.kvs else 0))
        if got.kvs:
            self._compacted = int(got.kvs[0].value or 0)
            self._compact_version = got.kvs[0].version
        log.info(
            "event=etcd-connected servers=%s version=%s etcd_revision=%d revision=%d compacted=%d",
            where,
            status.version,
            status.header.revision,
            self._revision,
            self._compacted,
        )

    async def _newest_under(self, low: bytes) -> int:
        request = pb.RangeRequest(
            key=low,
            range_end=prefix_end(low),
            limit=1,
            keys_only=True,
            sort_order=pb.RangeRequest.DESCEND,
            sort_target=pb.RangeRequest.MOD,
        )
        try:
            response = await self.kv.Range(request, timeout=self.config.request_timeout)
        except grpc.aio.AioRpcError as err:
            raise StoreUnavailableError(f"etcd at {','.join(self.config.servers)}: {err.details()}") from None
        return response.kvs[0].mod_revision if response.kvs else 0

    def _use(self, index: int) -> None:
        """Send everything to member `index` from now on (its channel made once, kept for later)."""
        channel = self._channels.get(index)
        if channel is None:
            channel = _channel(urlsplit(self.config.servers[index]).netloc, self._credentials)
            self._channels[index] = channel
        self._member = index
        self._channel = channel
        self._kv = pb_grpc.KVStub(channel)
        self._watch = pb_grpc.WatchStub(channel)
        self._lease = pb_grpc.LeaseStub(channel)

    def _failover(self, err: grpc.aio.AioRpcError, used: int) -> bool:
        """Member `used` could not be reached: move to the next one. False with one server or when etcd
        itself answered (`etcdserver: ...`, e.g. no quorum: another member would say the same). When a
        concurrent call has already moved off `used`, the member now in use is kept (moving again from
        it would skip a live member for a failure that was not its own)."""
        if len(self.config.servers) < 2 or err.code() != grpc.StatusCode.UNAVAILABLE:
            return False
        if (err.details() or "").startswith("etcdserver:"):
            return False
        if self._member != used:
            return True
        failed = self.config.servers[self._member]
        self._use((self._member + 1) % len(self.config.servers))
        log.warning(
            "event=etcd-failover from=%s to=%s cause=%s",
            failed,
            self.config.servers[self._member],
            err.details(),
        )
        return True

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._channel = None

    @property
    def revision(self) -> int:
        """The newest revision of a change under the prefix this server knows of (its own writes, the
        watch's events and etcd's periodic progress notifications): what a fresh read waits for."""
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    def _seen(self, revision: int) -> None:
        if revision > self._revision:
            self._revision = revision

    def _note(self, key: str, revision: int) -> None:
        self._seen(revision)
        if revision > self._key_revisions.get(key, 0):
            self._key_revisions[key] = revision

    def key_revision(self, key: str, applied: int) -> int:
        """The newest revision of `key` this server wrote or a failed write of it found, when a cache
        at revision `applied` does not hold it yet; else 0. What a read-modify-write of the key waits
        for before it reads the cache: its own last write, not every write of every other request (a
        change made elsewhere shows as the write's conflict, noted here for the retry)."""
        if len(self._key_revisions) > _KEY_REVISIONS_KEPT:
            self._key_revisions = {k: r for k, r in self._key_revisions.items() if r > applied}
        revision = self._key_revisions.get(key, 0)
        return revision if revision > applied else 0

    def _key(self, key: str) -> bytes:
        return self.layout.to_etcd(key, self.prefix).encode()

    def _keyvalue(self, kv: pb.KeyValue) -> KeyValue:
        return KeyValue(
            self.layout.from_etcd(kv.key.decode(), self.prefix), kv.value, kv.mod_revision, kv.create_revision
        )

    @property
    def kv(self) -> pb_grpc.KVStub:
        if self._kv is None:
            raise StoreUnavailableError("etcd store not started")
        return self._kv

    async def _call(self, method: str, request: Any, what: str, service: str = "kv") -> Any:
        """One RPC (`method` of the KV or the Lease service) on the member in use. When that member cannot
        be reached the next one is tried: at once for a read, and for a write only when the connection
        was never made (nothing was sent; a write cut off mid-flight may have been applied, so that is
        the caller's retryable 5xx rather than a second send)."""
        for attempt in range(len(self.config.servers)):
            used = self._member
            stub = self.kv if service == "kv" else self._lease
            try:
                return await getattr(stub, method)(request, timeout=self.config.request_timeout)
            except grpc.aio.AioRpcError as err:
                details = err.details() or ""
                if _COMPACTED in details:
                    raise CompactedError(getattr(request, "revision", 0), self._compacted) from None
                if _FUTURE in details:
                    raise FutureRevisionError(getattr(request, "revision", 0), self._revision) from None
                moved = self._failover(err, used)
                unsent = method == "Range" or any(n in details for n in _NOT_SENT)
                if not (moved and unsent) or attempt == len(self.config.servers) - 1:
                    raise _translate(err, what) from None
        raise AssertionError("unreachable")

    # --- reads ---------------------------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        response = await self._call("Range", pb.RangeRequest(key=self._key(key)), f"get {key}")
        return self._keyvalue(response.kvs[0]) if response.kvs else None

    async def list(
        self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0
    ) -> tuple[list[KeyValue], int, bool]:
        if revision and revision <= self._compacted:
            raise CompactedError(revision, self._compacted)
        if not revision and self._revision:
            # "Now" is the newest change we know of, not etcd's newest revision: a client that watches
            # from the list's resourceVersion must find the watch cache there already (etcd's revision may
            # have moved on keys outside the prefix, such as the compactor's).
            revision = max(self._revision, self._compacted)
        low = self._key(prefix)
        start = self._key(start_after) + b"\x00" if start_after else low
        request = pb.RangeRequest(
            key=max(low, start), range_end=prefix_end(low), revision=revision, limit=limit
        )
        response = await self._call("Range", request, f"list {prefix}")
        served = revision or response.header.revision
        return [self._keyvalue(kv) for kv in response.kvs], served, bool(limit) and response.more

    async def current_revision(self) -> int:
        """etcd's revision now, by a linearizable read (etcd's ReadIndex): every write acknowledged by any
        API server before this call is at or below it. What upstream's consistent reads from the watch
        cache ask etcd (GetCurrentResourceVersion) before waiting for the cache to get there. Concurrent
        callers share one request."""
        if self._next_revision is None:
            self._next_revision = asyncio.get_running_loop().create_future()
            if self._revision_round is None or self._revision_round.done():
                self._revision_round = asyncio.create_task(self._revision_rounds(), name="etcd-revision")
        return await asyncio.shield(self._next_revision)

    async def _revision_rounds(self) -> None:
        while (future := self._next_revision) is not None:
            self._next_revision = None
            try:
                response = await self._call("Range", pb.RangeRequest(key=COMPACT_KEY), "current revision")
            except Exception as err:  # handed to every waiter
                future.set_exception(err)
                future.exception()  # retrieved: a waiter that went away leaves no warning
            else:
                future.set_result(response.header.revision)

    async def count(self, prefix: str, revision: int, start_after: str = "") -> int:
        low = self._key(prefix)
        start = self._key(start_after) + b"\x00" if start_after else low
        request = pb.RangeRequest(
            key=max(low, start), range_end=prefix_end(low), revision=revision, count_only=True
        )
        response = await self._call("Range", request, f"count {prefix}")
        return int(response.count)

    async def live_count_if_unchanged(self, since: int, at: int) -> int | None:
        """The number of live keys under the prefix at revision `at` if none of them changed after
        `since`, else None. With the count equal to what a reader held at `since`, nothing under the prefix
        changed in between (a key written since would show its newer mod_revision; one deleted since
        would lower the count): revisions spent outside the prefix (compact_rev_key, other prefixes),
        which never come through our watch. Reads every key at `at` (etcd filters after reading), so
        it is the rare path, never a read's usual one."""
        low = self.prefix.encode()
        request = pb.RangeRequest(
            key=low, range_end=prefix_end(low), revision=at, keys_only=True, min_mod_revision=since + 1
        )
        response = await self._call("Range", request, "changes since")
        return None if response.kvs else response.count

    # --- writes: one transaction each, comparing the mod_revision read ---------------------------------

    async def _txn(self, key: str, compare: pb.Compare, success: pb.RequestOp, what: str) -> pb.TxnResponse:
        request = pb.TxnRequest(compare=[compare], success=[success], failure=[_range_op(compare.key)])
        return await self._call("Txn", request, f"{what} {key}")

    @staticmethod
    def _mod_compare(key: bytes, result: int, revision: int) -> pb.Compare:
        return pb.Compare(result=result, target=pb.Compare.MOD, key=key, mod_revision=revision)

    def _written(self, key: str, response: pb.TxnResponse) -> int:
        self._note(key, response.header.revision)
        return response.header.revision

    def _failed(self, key: str, response: pb.TxnResponse, expected: int) -> StoreError:
        found = response.responses[0].response_range.kvs
        if not found:
            return NotFoundError(key)
        # Another API server wrote it since our cache saw it: a retry waits until our watch has brought
        # that write here (reads wait for `revision`), instead of failing again on the same stale copy.
        self._note(key, found[0].mod_revision)
        return ConflictError(key, expected, found[0].mod_revision)

    async def create(self, key: str, value: bytes) -> int:
        ekey = self._key(key)
        put = pb.RequestOp(request_put=pb.PutRequest(key=ekey, value=value))
        response = await self._txn(key, self._mod_compare(ekey, pb.Compare.EQUAL, 0), put, "create")
        if not response.succeeded:
            raise KeyExistsError(key)
        return self._written(key, response)

    async def update(self, key: str, value: bytes, expected_revision: int) -> int:
        ekey = self._key(key)
        if expected_revision:
            compare = self._mod_compare(ekey, pb.Compare.EQUAL, expected_revision)
        else:
            compare = self._mod_compare(ekey, pb.Compare.GREATER, 0)
        put = pb.RequestOp(request_put=pb.PutRequest(key=ekey, value=value))
        response = await self._txn(key, compare, put, "update")
        if not response.succeeded:
            raise self._failed(key, response, expected_revision)
        return self._written(key, response)

    async def delete(self, key: str, expected_revision: int) -> int:
        ekey = self._key(key)
        if expected_revision:
            compare = self._mod_compare(ekey, pb.Compare.EQUAL, expected_revision)
        else:
            compare = self._mod_compare(ekey, pb.Compare.GREATER, 0)
        remove = pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=ekey))
        response = await self._txn(key, compare, remove, "delete")
        if not response.succeeded:
            raise self._failed(key, response, expected_revision)
        return self._written(key, response)

    async def put_with_ttl(self, key: str, value: bytes, ttl: int) -> int:
        """Write `key` on a fresh etcd lease of `ttl` seconds: etcd deletes it (a DELETE event for every
        watcher) unless it is written again before then. What upstream's storage does for an object
        with a TTL, such as the API servers' /masterleases/<ip> records."""
        grant = await self._call("LeaseGrant", pb.LeaseGrantRequest(TTL=ttl), f"lease {key}", "lease")
        put = pb.PutRequest(key=self._key(key), value=value, lease=grant.ID)
        response = await self._call("Put", put, f"put {key}")
        self._note(key, response.header.revision)
        return response.header.revision

    # --- layout --------------------------------------------------------------------------------------

    async def move_resource(self, old: str, new: str, page: int = 500) -> tuple[int, int]:
        """Move every object under the resource prefix `old` to `new` (both below --etcd-prefix), each in
        one transaction: put under the new key with its value and lease only while nothing is there, and
        delete the old key only while it is unchanged. Returns (moved, kept): `kept` objects stay where
        they are because the new key already holds an object. The moved objects get new, higher revisions.
        Idempotent: a second run, or another API server moving at the same time, finds nothing left."""
        low = (self.prefix + old.strip("/") + "/").encode()
        target = (self.prefix + new.strip("/") + "/").encode()
        moved = kept = 0
        start = low
        while True:
            request = pb.RangeRequest(key=start, range_end=prefix_end(low), limit=page)
            response = await self._call("Range", request, f"list {old}")
            for kv in response.kvs:
                new_key = target + kv.key[len(low) :]
                txn = pb.TxnRequest(
                    compare=[
                        self._mod_compare(kv.key, pb.Compare.EQUAL, kv.mod_revision),
                        pb.Compare(
                            result=pb.Compare.EQUAL, target=pb.Compare.CREATE, key=new_key, create_revision=0
                        ),
                    ],
                    success=[
                        pb.RequestOp(request_put=pb.PutRequest(key=new_key, value=kv.value, lease=kv.lease)),
                        pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=kv.key)),
                    ],
                )
                result = await self._call("Txn", txn, f"move {kv.key.decode()}")
                self._seen(result.header.revision)
                if result.succeeded:
                    moved += 1
                elif await self._exists(kv.key) and await self._exists(new_key):
                    kept += 1  # (gone: another API server moved it; changed: moved on the next start)
            if not response.more or not response.kvs:
                return moved, kept
            start = response.kvs[-1].key + b"\x00"

    async def _exists(self, key: bytes) -> bool:
        response = await self._call("Range", pb.RangeRequest(key=key, count_only=True), f"get {key.decode()}")
        return bool(response.count)

    # --- watch ---------------------------------------------------------------------------------------

    async def watch(self, from_revision: int) -> AsyncIterator[list[Event]]:
        """Every event under /registry/ after `from_revision`, one batch per etcd response.

        A broken stream (etcd restarting, a member lost) is opened again from the last delivered
        revision; only a compacted start ends the watch (CompactedError), as a 410 ends a client's.
        """
        last = from_revision
        failures = hops = 0
        while True:
            used = self._member
            try:
                async for batch in self._watch_once(last):
                    failures = hops = 0
                    last = max(last, batch[-1].revision)
                    yield batch
                return
            except grpc.aio.AioRpcError as err:
                if err.code() not in _UNAVAILABLE | _STREAM_BROKEN:
                    raise _translate(err, "watch") from None
                if hops < len(self.config.servers) - 1 and self._failover(err, used):
                    hops += 1  # another member, at once (backing off once every one has failed)
                    continue
                hops = 0
                delay = _WATCH_BACKOFF[min(failures, len(_WATCH_BACKOFF) - 1)]
                failures += 1
                log.warning(
                    "event=etcd-watch-lost from=%d code=%s retry_in=%.1f", last, err.code().name, delay
                )
                await asyncio.sleep(delay)

    async def _watch_once(self, after: int) -> AsyncIterator[list[Event]]:
        if self._watch is None:
            raise StoreUnavailableError("etcd store not started")
        low = self.prefix.encode()
        create = pb.WatchCreateRequest(
            key=low, range_end=prefix_end(low), start_revision=after + 1, prev_kv=True, progress_notify=True
        )
        # The request side stays open for the stream's life (closing it would end the watch).
        call = self._watch.Watch()
        try:
            await call.write(pb.WatchRequest(create_request=create))
            while (response := await call.read()) is not grpc.aio.EOF:
                if response.compact_revision:
                    raise CompactedError(after, response.compact_revision)
                if response.canceled:
                    raise StoreUnavailableError(f"etcd canceled the watch: {response.cancel_reason}")
                if response.created:
                    continue
                if not response.events:
                    if response.watch_id == -1:
                        # The answer to a WatchProgressRequest, which etcd before 3.4.25 sends even while
                        # the watcher is still catching up (etcd issue 15220): not a promise. We never
                        # ask, but another client library on this stream might.
                        continue
                    # A periodic progress notification (etcd sends it to synced watchers only): nothing
                    # up to its revision is missing.
                    self._seen(response.header.revision)
                    yield [Event("PROGRESS", "", b"", response.header.revision, 0, None)]
                    continue
                self._seen(response.events[-1].kv.mod_revision)
                yield [self._event(e) for e in response.events]
        finally:
            call.cancel()

    def _event(self, event: pb.Event) -> Event:
        kv = event.kv
        prev = event.prev_kv if event.HasField("prev_kv") else None
        key = self.layout.from_etcd(kv.key.decode(), self.prefix)
        if event.type == pb.Event.DELETE:
            value = prev.value if prev is not None else b"{}"
            create_revision = prev.create_revision if prev is not None else 0
            return Event(
                "DELETE", key, value, kv.mod_revision, create_revision, value if prev is not None else None
            )
        return Event(
            "PUT",
            key,
            kv.value,
            kv.mod_revision,
            kv.create_revision,
            prev.value if prev is not None else None,
        )

    # --- compaction ----------------------------------------------------------------------------------

    async def compact(self, revision: int) -> None:
        """Compact etcd's history to `revision`, once per round across API servers (compact_rev_key)."""
        if revision <= self._compacted:
            return
        compare = pb.Compare(
            result=pb.Compare.EQUAL, target=pb.Compare.VERSION, key=COMPACT_KEY, version=self._compact_version
        )
        put = pb.RequestOp(request_put=pb.PutRequest(key=COMPACT_KEY, value=str(revision).encode()))
        request = pb.TxnRequest(compare=[compare], success=[put], failure=[_range_op(COMPACT_KEY)])
        response = await self._call("Txn", request, "compact")
        if not response.succeeded:
            # Another API server compacted this round: take its word and its round counter.
            found = response.responses[0].response_range.kvs
            if found:
                self._compact_version = found[0].version
                self._compacted = max(self._compacted, int(found[0].value or 0))
            return
        self._compact_version += 1
        # Refused from now on, before etcd has finished dropping the history.
        self._compacted = revision
        with contextlib.suppress(CompactedError):
            await self._call("Compact", pb.CompactionRequest(revision=revision), "compact")
        log.info("event=etcd-compacted revision=%d", revision)


def parse_servers(text: str) -> tuple[str, ...]:
    """`--etcd-servers`: comma-separated http(s)://host:port URLs."""
    servers: Sequence[str] = [s.strip() for s in text.split(",") if s.strip()]
    for server in servers:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
            raise ValueError(f"--etcd-servers: {server!r} is not an http(s)://host:port URL")
    if len({urlsplit(s).scheme for s in servers}) > 1:
        raise ValueError("--etcd-servers: all http or all https")
    return tuple(servers)
