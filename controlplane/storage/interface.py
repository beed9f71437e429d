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


# etcd's default --max-request-bytes: the largest write (key, value and the transaction around them) it
# takes. The SQLite store holds every write to the same limit, so an object etcd would refuse is refused
# on either store.
MAX_REQUEST_BYTES = 1536 * 1024
# etcd's own words for its two refusals that no retry mends (rpctypes.ErrGRPCRequestTooLarge, ErrGRPCNoSpace).
TOO_LARGE = "etcdserver: request is too large"
NO_SPACE = "etcdserver: mvcc: database space exceeded"


class StoreRefusedError(StoreError):
    """The backend refused a write with an error of its own that no retry mends: the value is over
    etcd's --max-request-bytes, or etcd's --quota-backend-bytes is reached (its NOSPACE alarm). Upstream's
    registry translates neither (storage/errors' Interpret*Error pass them on), so its ErrorToAPIStatus
    answers a 500 with no reason and etcd's words as the message: `backend_message`."""

    def __init__(self, backend_message: str, detail: str = "") -> None:
        super().__init__(f"{backend_message} ({detail})" if detail else backend_message)
        self.backend_message = backend_message


class StoreTooLargeError(StoreRefusedError):
    """The write is over the request size limit (etcd's --max-request-bytes)."""


def write_too_large(key: str, value: bytes, limit: int) -> bool:
    """Whether etcd would refuse a write of `value` at `key` (a key below the default `/registry` prefix)
    as too large. etcd measures the whole raft request: the transaction names the key three times (compare,
    put, the read on failure) and frames it all in 76 bytes (measured on etcd 3.4: a 1 572 707-byte value
    under a 27-byte key is the largest it takes at its default limit)."""
    return 3 * (len(key.encode()) + len("/registry")) + 76 + len(value) > limit


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
