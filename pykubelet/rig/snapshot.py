"""Backups of a stack's store and their restore (`pykubelet etcd-snapshot save|list|restore`, k3s's idea).

- etcd: `etcdctl snapshot save` against a running member (etcd's own snapshot API, a consistent copy
  of the whole keyspace); SQLite: the sqlite3 online backup API on the live `state.db` (a consistent
  copy while the API server writes).
- Each snapshot `<state>/snapshots/<name>` has a sidecar `<name>.json`: the store, the cluster it
  belongs to (the SHA-256 of the cluster CA's certificate), the file's size and SHA-256, the revision.
  A restore refuses a file whose sidecar is missing, whose digest or size differs (truncated,
  altered) or that belongs to another cluster or store, before it changes anything.
- A restore needs the control plane stopped (`pykubelet down` first; the data stays); it is refused
  with that advice while an API server or etcd of the state dir runs.
- Revisions continue upward: SQLite gets the snapshot's log with the revision counter set past the
  highest the store ever reached and everything older marked compacted; etcd gets the snapshot's keys
  written into the member's existing data (read from a scratch member restored with `etcdctl snapshot
  restore`, the old keys deleted, the snapshot's put, then a compaction). Either way a watcher that
  comes back with a resourceVersion from before the restore is told 410 Gone and relists, instead of
  seeing time go back. Keys attached to an etcd lease (events, the API servers' master leases) are
  transient and not restored. A multi-member etcd is restored the same way: its members start on the
  peer ports their data knows, the snapshot's keys are written through one of them and raft carries them
  to the others (etcdctl's own per-member restore would start a new cluster at revision 1).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from pykubelet.rig import host
from pykubelet.rig.etcd import Etcd, EtcdCluster, etcd_members, make_pki

SNAPSHOTS_DIR = "snapshots"
ETCDCTL = "etcdctl"
# etcd's --max-txn-ops default: puts per transaction when writing the snapshot's keys back.
TXN_OPS = 128


class SnapshotError(Exception):
    """A snapshot that cannot be taken or restored; the message says why (and what to do)."""


@dataclass
class SnapshotInfo:
    name: str
    store: str  # "etcd" or "sqlite"
    cluster: str  # SHA-256 of the cluster CA's certificate
    size: int
    sha256: str
    revision: int
    created: str  # RFC 3339, UTC

    @classmethod
    def load(cls, path: Path) -> SnapshotInfo:
        try:
            return cls(**json.loads(path.with_name(path.name + ".json").read_text()))
        except (OSError, ValueError, TypeError) as err:
            raise SnapshotError(f"{path}: no readable metadata beside it ({path.name}.json): {err}") from None


def snapshots_dir(state_dir: Path) -> Path:
    return state_dir / SNAPSHOTS_DIR


def store_of(state_dir: Path) -> str:
    if (state_dir / "etcd").is_dir():
        return "etcd"
    if (state_dir / "apiserver" / "state.db").exists():
        return "sqlite"
    raise SnapshotError(f"no cluster store in {state_dir} (neither {state_dir}/etcd nor apiserver/state.db)")


def cluster_id(state_dir: Path) -> str:
    try:
        return hashlib.sha256((state_dir / "apiserver" / "pki" / "ca.crt").read_bytes()).hexdigest()
    except OSError as err:
        raise SnapshotError(f"no cluster CA in {state_dir}/apiserver/pki: {err}") from None


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _etcd_dir(state_dir: Path) -> Path:
    return state_dir / "etcd"


def _members(state_dir: Path) -> list[Path]:
    """The member dirs: <state>/etcd itself for one member, <state>/etcd/m<i> for a cluster."""
    root = _etcd_dir(state_dir)
    members = sorted(p for p in root.glob("m[0-9]*") if (p / "data").is_dir())
    return members or [root]


def _running_etcd_url(state_dir: Path) -> str:
    for proc in host.processes_of([str(_etcd_dir(state_dir))]):
        argv = list(proc.cmdline)
        if "--listen-client-urls" in argv:
            return argv[argv.index("--listen-client-urls") + 1]
    raise SnapshotError(f"no etcd of {state_dir} is running: start the cluster to take a snapshot")


def _etcdctl(state_dir: Path, url: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    pki = make_pki(_etcd_dir(state_dir) / "pki")
    argv = [ETCDCTL, "--endpoints", url, "--cacert", str(pki.ca_cert), "--cert", str(pki.client_cert),
            "--key", str(pki.client_key), *args]  # fmt: skip
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "ETCDCTL_API": "3"},
    )


def _etcd_status(file: Path) -> dict:
    done = subprocess.run(
        [ETCDCTL, "snapshot", "status", str(file), "-w", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ETCDCTL_API": "3"},
    )
    if done.returncode != 0:
        raise SnapshotError(
            f"{file} is not a whole etcd snapshot: {done.stderr.strip() or done.stdout.strip()}"
        )
    return json.loads(done.stdout)


def _sqlite_revision(db: sqlite3.Connection) -> int:
    (top,) = db.execute("SELECT COALESCE(MAX(rev), 0) FROM log").fetchone()
    row = db.execute("SELECT value FROM meta WHERE name='revision'").fetchone()
    return max(int(top), int(row[0]) if row else 0)


def save(state_dir: Path, name: str = "") -> SnapshotInfo:
    """A snapshot of the running cluster's store into <state>/snapshots/<name>."""
    store = store_of(state_dir)
    name = name or f"{store}-snapshot-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    if "/" in name or name.startswith("."):
        raise SnapshotError(f"snapshot name {name!r}: a plain file name")
    target = snapshots_dir(state_dir) / name
    if target.exists():
        raise SnapshotError(f"snapshot {name} exists already")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{name}.partial")
    if store == "etcd":
        done = _etcdctl(state_dir, _running_etcd_url(state_dir), "snapshot", "save", str(partial))
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise SnapshotError(f"etcdctl snapshot save failed: {done.stderr.strip()}")
        revision = int(_etcd_status(partial)["revision"])
    else:
        source = sqlite3.connect(f"file:{state_dir / 'apiserver' / 'state.db'}?mode=ro", uri=True)
        dest = sqlite3.connect(partial)
        try:
            source.backup(dest)
            revision = _sqlite_revision(dest)
        finally:
            dest.close()
            source.close()
    info = SnapshotInfo(
        name=name,
        store=store,
        cluster=cluster_id(state_dir),
        size=partial.stat().st_size,
        sha256=_digest(partial),
        revision=revision,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    target.with_name(name + ".json").write_text(json.dumps(asdict(info), indent=2))
    os.replace(partial, target)
    return info


def listing(state_dir: Path) -> list[SnapshotInfo]:
    out = []
    for path in sorted(snapshots_dir(state_dir).glob("*")):
        if path.suffix == ".json" or path.name.startswith("."):
            continue
        try:
            out.append(SnapshotInfo.load(path))
        except SnapshotError:
            continue
    return out


def resolve(state_dir: Path, name_or_path: str) -> Path:
    path = Path(name_or_path)
    if "/" not in name_or_path:
        path = snapshots_dir(state_dir) / name_or_path
    if not path.is_file():
        raise SnapshotError(f"no snapshot {name_or_path} (pykubelet etcd-snapshot list shows them)")
    return path


def verify(state_dir: Path, path: Path) -> SnapshotInfo:
    """The snapshot's metadata once it proved whole and this cluster's; SnapshotError otherwise."""
    info = SnapshotInfo.load(path)
    size = path.stat().st_size
    if size != info.size or _digest(path) != info.sha256:
        raise SnapshotError(
            f"snapshot {path} is damaged or truncated: {size} bytes, its metadata says {info.size} "
            "(digest mismatch); nothing was changed"
        )
    store = store_of(state_dir)
    if info.store != store:
        raise SnapshotError(f"snapshot {path} is of a {info.store} store, this cluster's is {store}")
    if info.cluster != cluster_id(state_dir):
        raise SnapshotError(
            f"snapshot {path} belongs to another cluster (its CA differs from {state_dir}/apiserver/pki/ca.crt); "
            "nothing was changed"
        )
    if store == "etcd":
        _etcd_status(path)
    else:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            (check,) = db.execute("PRAGMA integrity_check").fetchone()
        except sqlite3.DatabaseError as err:
            raise SnapshotError(f"snapshot {path} is not a whole SQLite database: {err}") from None
        finally:
            db.close()
        if check != "ok":
            raise SnapshotError(f"snapshot {path} fails SQLite's integrity check: {check}")
    return info


def control_plane_running(state_dir: Path) -> list[int]:
    roots = [str(state_dir / "apiserver"), str(_etcd_dir(state_dir))]
    return [p.pid for p in host.processes_of(roots)]


def restore(state_dir: Path, name_or_path: str) -> SnapshotInfo:
    """Bring the stopped cluster's store back to the snapshot, revisions continuing upward."""
    path = resolve(state_dir, name_or_path)
    running = control_plane_running(state_dir)
    if running:
        raise SnapshotError(
            f"the control plane of {state_dir} is running (pids {', '.join(map(str, running))}): stop it first "
            f"with `pykubelet down --state-dir {state_dir}` (the data stays), restore, then start it again "
            f"with `pykubelet up --state-dir {state_dir}` and the flags it was started with"
        )
    info = verify(state_dir, path)
    if info.store == "sqlite":
        _restore_sqlite(state_dir, path)
    else:
        _restore_etcd(state_dir, path)
    return info


def _restore_sqlite(state_dir: Path, snapshot: Path) -> None:
    live = state_dir / "apiserver" / "state.db"
    db = sqlite3.connect(live)
    try:
        before = _sqlite_revision(db)
    finally:
        db.close()  # the last connection: the WAL is checkpointed into the file and removed
    staged = live.with_name(".state.db.restoring")
    shutil.copyfile(snapshot, staged)
    db = sqlite3.connect(staged, isolation_level=None)
    try:
        after = max(before, _sqlite_revision(db)) + 1
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', ?)", (after,))
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('compacted', ?)", (after - 1,))
        db.execute("PRAGMA journal_mode=DELETE")
    finally:
        db.close()
    for leftover in ("state.db-wal", "state.db-shm"):  # the old database's: never applied to the new one
        (live.parent / leftover).unlink(missing_ok=True)
    os.replace(staged, live)


def _gateway(etcd: Etcd, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{etcd.url}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, context=etcd.ssl_context(), timeout=30) as resp:
        return json.loads(resp.read())


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _all_kvs(etcd: Etcd) -> list[dict]:
    """Every key without a lease, a page at a time."""
    out, start = [], b"\0"
    while True:
        page = _gateway(etcd, "/v3/kv/range", {"key": _b64(start), "range_end": _b64(b"\0"), "limit": 1000})
        kvs = page.get("kvs") or []
        out += [kv for kv in kvs if not int(kv.get("lease") or 0)]
        if not page.get("more"):
            return out
        start = base64.b64decode(kvs[-1]["key"]) + b"\0"


def _restore_etcd(state_dir: Path, snapshot: Path) -> None:
    root = _etcd_dir(state_dir)
    scratch = root / ".restore"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    done = subprocess.run(
        [ETCDCTL, "snapshot", "restore", str(snapshot), "--data-dir", str(scratch / "data"), "--name", "default",
         "--initial-cluster", "default=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"],
        capture_output=True, text=True, check=False, env={**os.environ, "ETCDCTL_API": "3"},
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise SnapshotError(f"etcdctl snapshot restore failed: {done.stderr.strip()}")
    members = _members(state_dir)
    source = Etcd(scratch, pki_dir=root / "pki")
    # Every member of a cluster starts (on the peer ports its data knows) so the writes reach a quorum;
    # they go through the first, and raft carries them to the others.
    live: Etcd | EtcdCluster = EtcdCluster(root, len(members)) if len(members) > 1 else Etcd(root)
    target = etcd_members(live)[0]
    try:
        source.start()
        live.start()
        kvs = _all_kvs(source)
        _gateway(target, "/v3/kv/deleterange", {"key": _b64(b"\0"), "range_end": _b64(b"\0")})
        for i in range(0, len(kvs), TXN_OPS):
            puts = [
                {"request_put": {"key": kv["key"], "value": kv.get("value", "")}}
                for kv in kvs[i : i + TXN_OPS]
            ]
            _gateway(target, "/v3/kv/txn", {"success": puts})
        revision = int(
            _gateway(target, "/v3/kv/range", {"key": _b64(b"\0"), "limit": 1})["header"]["revision"]
        )
        _gateway(target, "/v3/kv/compaction", {"revision": revision, "physical": True})
    finally:
        source.stop()
        live.stop()
        shutil.rmtree(scratch, ignore_errors=True)
