"""Expectations: what a controller has asked for and not yet seen in its cache, so it never acts twice
on a stale view (upstream's pkg/controller/controller_utils.go ControllerExpectations).

A ReplicaSet that has just created 10 pods must not create 10 more because its pod informer has not
delivered them yet. Before creating, it records "expect 10 adds"; each pod that arrives through the
watch lowers the count; until it reaches zero (or 5 minutes pass, in case a watch event was lost), the
ReplicaSet does not manage replicas again. Deletions are tracked by pod key, so the right arrival
counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

EXPECTATIONS_TIMEOUT = 300.0


@dataclass
class _Record:
    adds: int = 0
    dels: int = 0
    deleting: set[str] = field(default_factory=set)  # pod keys whose deletion we wait to see
    since: float = 0.0


class Expectations:
    def __init__(
        self, clock: Callable[[], float] = time.monotonic, timeout: float = EXPECTATIONS_TIMEOUT
    ) -> None:
        self.clock = clock
        self.timeout = timeout
        self._records: dict[str, _Record] = {}

    def satisfied(self, key: str) -> bool:
        """True when the controller may act on `key`: nothing pending, never asked, or expired."""
        record = self._records.get(key)
        if record is None:
            return True
        if record.adds <= 0 and record.dels <= 0:
            return True
        return self.clock() - record.since > self.timeout

    def expect_creations(self, key: str, count: int) -> None:
        self._records[key] = _Record(adds=count, since=self.clock())

    def expect_deletions(self, key: str, pod_keys: Iterable[str]) -> None:
        keys = set(pod_keys)
        self._records[key] = _Record(dels=len(keys), deleting=keys, since=self.clock())

    def creation_observed(self, key: str) -> None:
        record = self._records.get(key)
        if record is not None:
            record.adds -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        record = self._records.get(key)
        if record is not None and pod_key in record.deleting:
            record.deleting.discard(pod_key)
            record.dels -= 1

    def lower(self, key: str, adds: int = 0, dels: int = 0) -> None:
        """Creations or deletions that were expected but will not happen (they failed or were skipped)."""
        record = self._records.get(key)
        if record is not None:
            record.adds -= adds
            record.dels -= dels

    def delete(self, key: str) -> None:
        self._records.pop(key, None)
