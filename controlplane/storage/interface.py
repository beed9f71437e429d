"""The store interface every backend implements (SQLite and etcd).

It mirrors etcd's model on purpose: one global revision counter, every write gets the next revision,
and that revision is the object's resourceVersion. Keeping the REST layer on this narrow surface is what
lets a second backend slot in without changing request handling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol


class StoreError(Exception):
    """Base for errors the REST layer turns into Kubernetes Status responses."""


class KeyExistsError(StoreError):
    """Create of a key that already holds a live value."""


class NotFoundError(StoreError):
    """The key has no live value."""


class ConflictError(StoreError):
    """The caller's expected revision is not the key's current revision."""

    def __init__(self, key: str, expected: int, actual: int) -> None:
        super().__init__(f"{key}: expected revision {expected}, found {actual}")
        self.expected = expected
        self.actual = actual


class StoreUnavailableError(StoreError):
    """The backend could not be reached or did not answer in time (a retryable 5xx above); a write that
    failed so was applied whole or not at all. `backend_message` is the backend's own error when it
    answered with one (etcd without quorum: `etcdserver: request timed out`), which upstream passes
    through to the client as it is."""

    def __init__(self, message: str, backend_message: str = "") -> None:
        super().__init__(message)
        self.backend_message = backend_message


class StoreTooLargeError(StoreError):
    """The value is over the backend's request size limit (etcd's --max-request-bytes): a 413 above."""


class CompactedError(StoreError):
    """A revision older than the compaction point was asked for (becomes 410 Gone)."""

    def __init__(self, requested: int, compacted: int) -> None:
        super().__init__(f"revision {requested} has been compacted (oldest available {compacted + 1})")
        self.requested = requested
        self.compacted = compacted


class FutureRevisionError(StoreError):
    """A revision newer than the store's newest was asked for (etcd's `mvcc: required revision is a
    future revision`): upstream's 504 `Too large resource version` above."""

    def __init__(self, requested: int, current: int) -> None:
        super().__init__(f"revision {requested} is in the future (current {current})")
        self.requested = requested
        self.current = current


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One live value: mod_revision is the resourceVersion; create_revision survives updates."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int


@dataclass(frozen=True, slots=True)
class Event:
    """One committed change. For DELETE, `value` is the last live value (watchers need the object).
    `prev_value` is filled where the backend has it cheaply (history replay); None otherwise.
    PROGRESS (etcd's progress notification) changes nothing and has no key: every event up to its
    revision has been delivered, so a cache fed by the watch is current up to there."""

    type: Literal["PUT", "DELETE", "PROGRESS"]
    key: str
    value: bytes
    revision: int
    create_revision: int
    prev_value: bytes | None


class Store(Protocol):
    """Revisioned key-value storage. Keys are '/'-separated strings; values are opaque bytes."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def revision(self) -> int:
        """The newest committed revision (0 for an empty store)."""
        ...

    @property
    def compacted_revision(self) -> int:
        """Revisions at or below this are gone from history."""
        ...

    async def get(self, key: str) -> KeyValue | None: ...

    async def list(
        self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0
    ) -> tuple[list[KeyValue], int, bool]:
        """Live values under `prefix` as of `revision` (0 = newest), sorted by key.

        Returns (items, the revision served, whether more items follow). Raises CompactedError when
        the revision is no longer available.
        """
        ...

    async def count(self, prefix: str, revision: int, start_after: str = "") -> int:
        """How many live keys under `prefix` sort after `start_after` as of `revision` (a paged list's
        remainingItemCount, which upstream takes from etcd's range count)."""
        ...

    async def create(self, key: str, value: bytes) -> int: ...

    async def update(self, key: str, value: bytes, expected_revision: int) -> int: ...

    async def delete(self, key: str, expected_revision: int) -> int: ...

    def watch(self, from_revision: int) -> AsyncIterator[list[Event]]:
        """Every event after `from_revision`, in order, batched; raises CompactedError if too old."""
        ...

    async def compact(self, revision: int) -> None: ...

    # Optional, for backends that have them (the watch cache uses them when present):
    #   history(after: int) -> list[Event]        retained events after a revision, for a warm restart
    #   subscribe(listener: Callable[[Event], None])  synchronous commit notification (in-process stores)
