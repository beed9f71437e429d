"""Backup benchmark (issue 31): `pykubelet etcd-snapshot save` and `restore` of a store holding N objects,
on SQLite and on etcd. Figures are reported, never asserted.

  python bench/snapshot/saverestore.py [--objects 10000] [--out DIR]
  python bench/snapshot/saverestore.py --smoke --out DIR     # 50 objects

For each store a state dir is laid out as `pykubelet up` lays one out (`<state>/apiserver` with the
cluster CA and, for SQLite, `state.db`; `<state>/etcd` for a single etcd member, TLS with client
certificates) and N ConfigMaps of about 1 KiB are written straight into the store under the keys an
API server uses. Then, timed: `save` while the store is live (etcdctl's snapshot of the running member;
SQLite's online backup), half of the objects deleted, the store stopped, `restore`, and the store
started again and counted: every object back and the revision above the one before the restore (so
watches relist). No API server runs: what is timed is the snapshot and the restore, which need none
(restore wants the control plane stopped anyway); an API server's own start after a restore is the
same as after any restart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver.certs import ensure_pki
from controlplane.apiserver.kindparts import builtin_table
from controlplane.storage.etcd import EtcdConfig, EtcdStore
from controlplane.storage.sqlite import SQLiteStore
from pykubelet.rig import snapshot
from pykubelet.rig.etcd import Etcd

STORES = ("sqlite", "etcd")
NAMESPACE = "bench"
PREFIX = f"/configmaps/{NAMESPACE}/"
WRITERS = 64  # concurrent writes while seeding etcd


def configmap(i: int) -> bytes:
    """A ConfigMap as an API server stores it, about 1 KiB."""
    obj = {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {
            "name": f"cm-{i:05d}",
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench"},
        },
        "data": {"config.yaml": "x" * 800},
    }
    return json.dumps(obj, separators=(",", ":")).encode()


def open_store(state: Path, store: str, etcd: Etcd | None) -> SQLiteStore | EtcdStore:
    if store == "sqlite":
        return SQLiteStore(state / "apiserver" / "state.db")
    assert etcd is not None
    pki = etcd.pki
    config = EtcdConfig((etcd.url,), pki.ca_cert, pki.client_cert, pki.client_key)
    return EtcdStore(config, builtin_table().etcd_layout())


async def in_store(state: Path, store: str, etcd: Etcd | None, work) -> object:  # type: ignore[no-untyped-def]
    s = open_store(state, store, etcd)
    await s.start()
    try:
        return await work(s)
    finally:
        await s.close()


async def seed(s: SQLiteStore | EtcdStore, objects: int) -> None:
    keys = iter(range(objects))

    async def writer() -> None:
        for i in keys:
            await s.create(f"{PREFIX}cm-{i:05d}", configmap(i))

    await asyncio.gather(*(writer() for _ in range(WRITERS if isinstance(s, EtcdStore) else 1)))


async def delete_half(s: SQLiteStore | EtcdStore) -> int:
    items, _, _ = await s.list(PREFIX)
    doomed = items[::2]
    for kv in doomed:
        await s.delete(kv.key, kv.mod_revision)
    return len(doomed)


async def count(s: SQLiteStore | EtcdStore) -> tuple[int, int]:
    """The objects stored and the store's newest revision."""
    items, _, _ = await s.list(PREFIX)
    return len(items), (await s.current_revision() if isinstance(s, EtcdStore) else s.revision)


async def measure(store: str, objects: int, root: Path) -> dict[str, object]:
    state = root / store
    ensure_pki(state / "apiserver")  # the cluster CA: a snapshot names the cluster it belongs to
    etcd = Etcd(state / "etcd") if store == "etcd" else None
    if etcd is not None:
        etcd.start()
    try:
        started = time.monotonic()
        await in_store(state, store, etcd, lambda s: seed(s, objects))
        seeded = time.monotonic() - started
        started = time.monotonic()
        info = await asyncio.to_thread(snapshot.save, state, "bench")
        save = time.monotonic() - started
        deleted = await in_store(state, store, etcd, delete_half)
        _, before = await in_store(state, store, etcd, count)  # type: ignore[misc]
    finally:
        if etcd is not None:
            etcd.stop()
    started = time.monotonic()
    await asyncio.to_thread(snapshot.restore, state, "bench")
    restore = time.monotonic() - started
    if etcd is not None:
        etcd.start()
    try:
        back, after = await in_store(state, store, etcd, count)  # type: ignore[misc]
    finally:
        if etcd is not None:
            etcd.remove()
    if back != objects or after <= before:
        raise SystemExit(
            f"{store}: {back} of {objects} objects after the restore, revision {before} -> {after}"
        )
    return {
        "store": store,
        "objects": objects,
        "seed_seconds": round(seeded, 2),
        "save_seconds": round(save, 2),
        "snapshot_mib": round(info.size / 2**20, 1),
        "deleted_before_restore": deleted,
        "restore_seconds": round(restore, 2),
        "objects_after_restore": back,
        "revision_before_restore": before,
        "revision_after_restore": after,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="snapbench-") as tmp:
        for store in STORES:
            rows.append(await measure(store, args.objects, Path(tmp)))
    return {
        "objects": args.objects,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "rows": rows,
    }


def markdown(result: dict) -> str:  # type: ignore[type-arg]
    lines = [
        f"# Snapshot save and restore, {result['objects']} ConfigMaps",
        "",
        "`python bench/snapshot/saverestore.py` (`pykubelet etcd-snapshot save|restore`'s code, in-process; "
        f"load average {result['load_average']} on {result['cpus']} CPUs)",
        "",
        "| store | objects | save s | snapshot MiB | restore s | back after restore | revision before -> after |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['store']} | {r['objects']} | {r['save_seconds']} | {r['snapshot_mib']} | "
            f"{r['restore_seconds']} | {r['objects_after_restore']} | "
            f"{r['revision_before_restore']} -> {r['revision_after_restore']} |"
        )
    lines += [
        "",
        "Restore on etcd reads the snapshot into a scratch member and writes its keys into the live member's "
        "existing data (so revisions continue upward), in transactions of 128 puts; SQLite copies the file "
        "and moves its revision counter past the old one.",
    ]
    return "\n".join(lines) + "\n"


def svg(result: dict) -> str:  # type: ignore[type-arg]
    bars = []
    for r in result["rows"]:
        bars += [(f"{r['store']} save", r["save_seconds"]), (f"{r['store']} restore", r["restore_seconds"])]
    return bar_svg(f"Snapshot of {result['objects']} objects", bars, "s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=10_000)
    run_and_report(parser, "snapshot-saverestore", main, markdown, svg, smoke={"objects": 50})
