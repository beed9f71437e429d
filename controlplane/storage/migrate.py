"""`pykubelet migrate-store --from sqlite:PATH --to etcd:URL[,URL...]`: carry a cluster from SQLite to etcd.

Every live object is copied as stored (names, UIDs, creation timestamps, finalizers, owner references:
the value is the same JSON), one etcd write per object in the order of their SQLite resourceVersions, so
the objects' relative order survives; the numbers themselves cannot (etcd hands out its own revisions).

Clients are told the way upstream tells them after an etcd restore (`etcdutl snapshot restore
--bump-revision --mark-compacted`): etcd's revision is first raised past the newest SQLite revision and
then everything up to there is compacted. Every resourceVersion a client kept from the old store is then
"too old": its watch gets 410 Gone and it relists, instead of being mistaken for a version of the new
store (which would make it miss or repeat changes). etcd 3.4 has no offline bump, so the bump is writes
of one key outside the prefix (`pykubelet-migration`), many at once: a few seconds per ten thousand.

The destination must hold nothing under its prefix, and no API server may be using the source while
this runs (stop it first; SQLite's file belongs to one server).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from controlplane.storage.etcd import EtcdConfig, EtcdStore, parse_servers
from controlplane.storage.etcdkeys import KeyLayout, prefix_end
from controlplane.storage.etcdpb import rpc_pb2 as pb
from controlplane.storage.interface import KeyValue, StoreError
from controlplane.storage.sqlite import SQLiteStore

log = logging.getLogger("controlplane.storage.migrate")

BUMP_KEY = b"pykubelet-migration"
BUMP_CONCURRENCY = 64


class MigrationError(Exception):
    """The migration cannot start or could not finish (the message says which and why)."""


@dataclass(frozen=True)
class MigrationReport:
    objects: int
    source_revision: int  # the SQLite store's newest revision
    first_revision: int  # etcd's revision of the first copied object
    last_revision: int  # ... and of the last
    compacted: int  # every resourceVersion up to here is now 410 Gone
    seconds: float

    def describe(self) -> str:
        return (
            f"copied {self.objects} objects (SQLite resourceVersions up to {self.source_revision}) to etcd "
            f"revisions {self.first_revision}..{self.last_revision} in the same order; etcd is compacted at "
            f"{self.compacted}, so every resourceVersion from before is answered 410 Gone and clients "
            f"relist ({self.seconds:.1f} s)"
        )


def in_write_order(items: list[KeyValue]) -> list[KeyValue]:
    """The objects in the order they were last written (their resourceVersions), oldest first."""
    return sorted(items, key=lambda kv: (kv.mod_revision, kv.key))


async def _empty_prefix(target: EtcdStore) -> None:
    low = target.prefix.encode()
    request = pb.RangeRequest(key=low, range_end=prefix_end(low), count_only=True)
    response = await target.kv.Range(request, timeout=target.config.request_timeout)
    if response.count:
        raise MigrationError(
            f"etcd already holds {response.count} keys under {target.prefix}: migrate into an empty etcd "
            "(or another --etcd-prefix)"
        )


async def _bump(target: EtcdStore, past: int) -> int:
    """Raise etcd's revision above `past` (writes of BUMP_KEY, many in flight); returns the revision."""
    status = await target.kv.Range(pb.RangeRequest(key=BUMP_KEY), timeout=target.config.request_timeout)
    revision = status.header.revision
    missing = past - revision
    while missing > 0:
        batch = min(missing, BUMP_CONCURRENCY)
        puts = [
            target.kv.Put(pb.PutRequest(key=BUMP_KEY, value=b""), timeout=target.config.request_timeout)
            for _ in range(batch)
        ]
        answers = await asyncio.gather(*puts)
        revision = max(a.header.revision for a in answers)
        missing = past - revision
    return revision


async def migrate(source: SQLiteStore, target: EtcdStore) -> MigrationReport:
    started = time.monotonic()
    await _empty_prefix(target)
    items, source_revision, _ = await source.list("/")
    ordered = in_write_order(items)
    # Past every old resourceVersion first, so that no copied object gets a number an old client knows.
    await _bump(target, source_revision)
    first = last = 0
    for kv in ordered:
        last = await target.create(kv.key, kv.value)
        first = first or last
    compacted = await _bump(target, max(last, source_revision) + 1)
    await target.compact(compacted)
    log.info(
        "event=migrated objects=%d source_revision=%d compacted=%d", len(ordered), source_revision, compacted
    )
    return MigrationReport(len(ordered), source_revision, first, last, compacted, time.monotonic() - started)


def _store_url(text: str, flag: str, scheme: str) -> str:
    kind, sep, rest = text.partition(":")
    if not sep or kind != scheme or not rest:
        raise SystemExit(
            f"pykubelet migrate-store: {flag} {text!r}: expected {scheme}:{'PATH' if scheme == 'sqlite' else 'URL[,URL]'}"
        )
    return rest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, help="sqlite:PATH (an API server's DIR/state.db)"
    )
    parser.add_argument("--to", dest="target", required=True, help="etcd:https://HOST:PORT[,...]")
    parser.add_argument(
        "--etcd-cafile", type=Path, default=None, help="CA that signed etcd's serving certificate"
    )
    parser.add_argument(
        "--etcd-certfile", type=Path, default=None, help="client certificate presented to etcd"
    )
    parser.add_argument("--etcd-keyfile", type=Path, default=None, help="key of --etcd-certfile")
    parser.add_argument("--etcd-prefix", default="/registry", help="the prefix of every key in etcd")


def run(args: argparse.Namespace, layout: KeyLayout | None = None) -> int:
    """`layout`: where etcd holds each resource (the API server's kinds say: controlplane/migratestore.py)."""
    path = Path(_store_url(args.source, "--from", "sqlite"))
    if not path.is_file():
        raise SystemExit(f"pykubelet migrate-store: --from {args.source}: no such file")
    try:
        servers = parse_servers(_store_url(args.target, "--to", "etcd"))
    except ValueError as err:
        raise SystemExit(f"pykubelet migrate-store: {err}") from None
    config = EtcdConfig(servers, args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile, args.etcd_prefix)

    async def main() -> MigrationReport:
        source, target = SQLiteStore(path), EtcdStore(config, layout)
        await source.start()
        try:
            await target.start()
            try:
                return await migrate(source, target)
            finally:
                await target.close()
        finally:
            await source.close()

    try:
        report = asyncio.run(main())
    except (MigrationError, StoreError) as err:
        raise SystemExit(f"pykubelet migrate-store: {err}") from None
    print(f"pykubelet migrate-store: {report.describe()}", file=sys.stderr)
    return 0
