"""SQLite backend: an append-only log table whose row id is the revision (the kine model).

Every write appends one row, so history for watches and paginated lists at a fixed revision is a plain
query, and compaction deletes superseded rows. WAL with synchronous=NORMAL makes a committed
transaction durable against the process being killed (kill -9); only a power loss can drop the newest
commits, the same trade etcd's default makes when its disk lies.

Calls run on the event loop thread on purpose: a write is tens of microseconds, one connection keeps
revisions strictly ordered without locks, and a thread hop would cost more than the query.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from controlplane.storage.interface import (
    MAX_REQUEST_BYTES,
    TOO_LARGE,
    CompactedError,
    ConflictError,
    Event,
    FutureRevisionError,
    KeyExistsError,
    KeyValue,
    NotFoundError,
    StoreTooLargeError,
    write_too_large,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    rev INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    create_rev INTEGER NOT NULL,
    prev_rev INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    value BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_rev ON log (key, rev);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def _prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with `prefix`."""
    return prefix + "\U0010ffff"


class SQLiteStore:
    """The default `Store`: one file, one writer, revisions from the log's primary key."""

    def __init__(self, path: Path | str, max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        self._path = str(path)
        # etcd's --max-request-bytes, held here too: an object etcd would refuse is refused on SQLite.
        self.max_request_bytes = max_request_bytes
        self._db: sqlite3.Connection | None = None
        self._revision = 0
        self._compacted = 0
        self._subscribers: set[asyncio.Queue[list[Event]]] = set()
        self._listeners: list[Callable[[Event], None]] = []
        # key -> (revision, create revision, deleted) of its newest row: the precondition check of a
        # write needs no query (this process is the only writer).
        self._index: dict[str, tuple[int, int, bool]] = {}
        self._checkpointer: asyncio.Task[None] | None = None
        self.checkpoint_interval = 1.0

    async def start(self) -> None:
        db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints fsync the database file, which can stall for a long time on a busy disk; they run in
        # a thread on their own connection instead of inside a commit on the event loop.
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.executescript(_SCHEMA)
        row = db.execute("SELECT MAX(rev) FROM log").fetchone()
        self._revision = int(row[0] or 0)
        row = db.execute("SELECT value FROM meta WHERE name='compacted'").fetchone()
        self._compacted = int(row[0]) if row else 0
        # Revisions must never go backwards, even after compaction removed the newest rows' history.
        row = db.execute("SELECT value FROM meta WHERE name='revision'").fetchone()
        if row:
            self._revision = max(self._revision, int(row[0]))
        self._index = {
            key: (rev, create_rev, bool(deleted))
            for key, rev, create_rev, deleted in db.execute(
                "SELECT key, rev, create_rev, deleted FROM log WHERE rev IN (SELECT MAX(rev) FROM log GROUP BY key)"
            )
        }
        self._db = db
        self._checkpointer = asyncio.create_task(self._checkpoint_loop(), name="sqlite-checkpoint")

    async def _checkpoint_loop(self) -> None:
        def checkpoint() -> None:
            conn = sqlite3.connect(self._path, isolation_level=None)
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            finally:
                conn.close()

        while True:
            await asyncio.sleep(self.checkpoint_interval)
            try:
                await asyncio.to_thread(checkpoint)
            except sqlite3.Error:
                continue  # busy: the next round catches up

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        if self._db is not None:
            self._db.close()
            self._db = None

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted_revision(self) -> int:
        return self._compacted

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("store not started")
        return self._db

    def _latest(self, key: str) -> tuple[int, int, int, bytes] | None:
        """(rev, create_rev, deleted, value) of the newest row for key."""
        return self.db.execute(
            "SELECT rev, create_rev, deleted, value FROM log WHERE key=? ORDER BY rev DESC LIMIT 1", (key,)
        ).fetchone()

    def _live(self, key: str) -> tuple[int, int] | None:
        """(rev, create_rev) of the key's live value, from the index."""
        entry = self._index.get(key)
        if entry is None or entry[2]:
            return None
        return entry[0], entry[1]

    async def get(self, key: str) -> KeyValue | None:
        row = self._latest(key)
        if row is None or row[2]:
            return None
        return KeyValue(key, row[3], row[0], row[1])

    async def list(
        self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0
    ) -> tuple[list[KeyValue], int, bool]:
        rev = revision or self._revision
        if revision and revision <= self._compacted:
            raise CompactedError(revision, self._compacted)
        if revision > self._revision:
            raise FutureRevisionError(revision, self._revision)  # as etcd's mvcc answers it
        lower = max(prefix, start_after + "\x00") if start_after else prefix
        query = (
            "SELECT l.key, l.value, l.rev, l.create_rev FROM log l JOIN ("
            " SELECT key, MAX(rev) AS rev FROM log WHERE key >= ? AND key < ? AND rev <= ? GROUP BY key"
            ") m ON l.rev = m.rev WHERE l.deleted = 0 ORDER BY l.key"
        )
        params: tuple[object, ...] = (lower, _prefix_end(prefix), rev)
        if limit:
            query += " LIMIT ?"
            params += (limit + 1,)
        rows = self.db.execute(query, params).fetchall()
        more = bool(limit) and len(rows) > limit
        if more:
            rows = rows[:limit]
        return [KeyValue(r[0], r[1], r[2], r[3]) for r in rows], rev, more

    async def count(self, prefix: str, revision: int, start_after: str = "") -> int:
        lower = max(prefix, start_after + "\x00") if start_after else prefix
        query = (
            "SELECT COUNT(*) FROM log l JOIN ("
            " SELECT key, MAX(rev) AS rev FROM log WHERE key >= ? AND key < ? AND rev <= ? GROUP BY key"
            ") m ON l.rev = m.rev WHERE l.deleted = 0"
        )
        row = self.db.execute(query, (lower, _prefix_end(prefix), revision or self._revision)).fetchone()
        return int(row[0])

    def _append(self, key: str, create_rev: int, prev_rev: int, deleted: bool, value: bytes) -> int:
        rev = self._revision + 1
        self.db.execute(
            "INSERT INTO log (rev, key, create_rev, prev_rev, deleted, value) VALUES (?, ?, ?, ?, ?, ?)",
            (rev, key, create_rev or rev, prev_rev, int(deleted), value),
        )
        self._revision = rev
        self._index[key] = (rev, create_rev or rev, deleted)
        return rev

    def subscribe(self, listener: Callable[[Event], None]) -> None:
        """Call `listener` synchronously after each commit, before the write returns.

        The watch cache uses this for an in-process store so that it is never behind the store: a read
        right after an acknowledged write needs no waiting.
        """
        self._listeners.append(listener)

    def _publish(self, event: Event) -> None:
        for listener in self._listeners:
            listener(event)
        batch = [event]
        for queue in self._subscribers:
            queue.put_nowait(batch)

    def _check_size(self, key: str, value: bytes) -> None:
        # Before any other check, as etcd measures a request before it applies the transaction.
        if write_too_large(key, value, self.max_request_bytes):
            raise StoreTooLargeError(TOO_LARGE, key)

    async def create(self, key: str, value: bytes) -> int:
        self._check_size(key, value)
        if self._live(key) is not None:
            raise KeyExistsError(key)
        entry = self._index.get(key)
        prev = entry[0] if entry else 0
        rev = self._append(key, 0, prev, False, value)
        self._publish(Event("PUT", key, value, rev, rev, None))
        return rev

    async def update(self, key: str, value: bytes, expected_revision: int) -> int:
        self._check_size(key, value)
        live = self._live(key)
        if live is None:
            raise NotFoundError(key)
        if expected_revision and live[0] != expected_revision:
            raise ConflictError(key, expected_revision, live[0])
        rev = self._append(key, live[1], live[0], False, value)
        # prev_value is left out on the write path (the watch cache keeps its own previous state).
        self._publish(Event("PUT", key, value, rev, live[1], None))
        return rev

    async def delete(self, key: str, expected_revision: int) -> int:
        if self._live(key) is None:
            raise NotFoundError(key)
        latest = self._latest(key)
        if latest is None or latest[2]:
            raise NotFoundError(key)
        if expected_revision and latest[0] != expected_revision:
            raise ConflictError(key, expected_revision, latest[0])
        rev = self._append(key, latest[1], latest[0], True, latest[3])
        self._publish(Event("DELETE", key, latest[3], rev, latest[1], latest[3]))
        return rev

    def history(self, after: int) -> list[Event]:
        """Every retained event after `after`, oldest first (the watch cache rebuilds its window)."""
        rows = self.db.execute(
            "SELECT l.rev, l.key, l.create_rev, l.deleted, l.value, p.value FROM log l"
            " LEFT JOIN log p ON p.rev = l.prev_rev AND p.key = l.key AND p.deleted = 0"
            " WHERE l.rev > ? ORDER BY l.rev",
            (after,),
        ).fetchall()
        return [Event("DELETE" if r[3] else "PUT", r[1], r[4], r[0], r[2], r[5]) for r in rows]

    async def watch(self, from_revision: int) -> AsyncIterator[list[Event]]:
        if from_revision < self._compacted:
            raise CompactedError(from_revision, self._compacted)
        queue: asyncio.Queue[list[Event]] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            last = from_revision
            backlog = self.history(from_revision)
            if backlog:
                last = backlog[-1].revision
                yield backlog
            while True:
                batch = [e for e in await queue.get() if e.revision > last]
                if batch:
                    last = batch[-1].revision
                    yield batch
        finally:
            self._subscribers.discard(queue)

    async def compact(self, revision: int, batch: int = 2000) -> None:
        """Drop history at or below `revision`, keeping each key's newest row at that point.

        Runs in small transactions with a yield to the event loop between them, so compacting a large
        history never stalls requests; revisions at or below `revision` are refused from the start.
        """
        if revision <= self._compacted:
            return
        db = self.db
        self._compacted = revision
        # Recorded before any row goes, so that a crash half-way never lets an old revision be served
        # from a partly compacted history.
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('compacted', ?)", (revision,))
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', ?)", (self._revision,))
        low = max(int(db.execute("SELECT MIN(rev) FROM log").fetchone()[0] or 1) - 1, 0)
        while low < revision:
            high = min(low + batch, revision)
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "DELETE FROM log WHERE rev > ? AND rev <= ? AND (deleted = 1 OR EXISTS ("
                    " SELECT 1 FROM log n WHERE n.key = log.key AND n.rev > log.rev AND n.rev <= ?))",
                    (low, high, revision),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            low = high
            await asyncio.sleep(0)
        self._index = {k: v for k, v in self._index.items() if not (v[2] and v[0] <= revision)}
