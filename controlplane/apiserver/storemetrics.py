"""etcd_request_duration_seconds as kube-apiserver 1.32 reports it (k8s.io/apiserver/pkg/storage/etcd3/metrics):
the latency of each storage request by operation (get, list, create, update, delete, count) and type, the
resource it is for (`pods`, `deployments.apps`: the first segment of our keys, upstream's
groupResource string). A wrapper around whichever Store the server runs on (etcd, or SQLite in its
place, as kine stands in for etcd under kube-apiserver); everything else passes through untouched."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Histogram

from controlplane.storage.interface import Event, KeyValue, Store

T = TypeVar("T")
# The buckets upstream gave it, the same as the request latency SLO's.
BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60,
)  # fmt: skip


def resource_of(key: str) -> str:
    """The resource a key belongs to: `/deployments.apps/ns/name` -> `deployments.apps`."""
    return key.lstrip("/").split("/", 1)[0]


class MeasuredStore:
    """A Store whose requests are timed into etcd_request_duration_seconds."""

    def __init__(self, store: Store, registry: CollectorRegistry) -> None:
        self.inner = store
        self.latency = Histogram(
            "etcd_request_duration_seconds",
            "[ALPHA] Etcd request latency in seconds for each operation and object type.",
            ["operation", "type"],
            buckets=BUCKETS,
            registry=registry,
        )
        self._children: dict[tuple[str, str], Any] = {}

    def _observe(self, operation: str, key: str, started: float) -> None:
        label = (operation, resource_of(key))
        child = self._children.get(label)
        if child is None:
            child = self._children[label] = self.latency.labels(*label)
        child.observe(time.perf_counter() - started)

    def __getattr__(self, name: str) -> Any:
        # start, close, compact and the optional history/subscribe pass straight through
        return getattr(self.inner, name)

    @property
    def revision(self) -> int:
        return self.inner.revision

    @property
    def compacted_revision(self) -> int:
        return self.inner.compacted_revision

    async def _timed(self, operation: str, key: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self._observe(operation, key, started)

    async def get(self, key: str) -> KeyValue | None:
        return await self._timed("get", key, self.inner.get(key))

    async def list(
        self, prefix: str, revision: int = 0, start_after: str = "", limit: int = 0
    ) -> tuple[list[KeyValue], int, bool]:
        return await self._timed("list", prefix, self.inner.list(prefix, revision, start_after, limit))

    async def count(self, prefix: str, revision: int, start_after: str = "") -> int:
        return await self._timed("listWithCount", prefix, self.inner.count(prefix, revision, start_after))

    async def create(self, key: str, value: bytes) -> int:
        return await self._timed("create", key, self.inner.create(key, value))

    async def update(self, key: str, value: bytes, expected_revision: int) -> int:
        return await self._timed("update", key, self.inner.update(key, value, expected_revision))

    async def delete(self, key: str, expected_revision: int) -> int:
        return await self._timed("delete", key, self.inner.delete(key, expected_revision))

    def watch(self, from_revision: int) -> AsyncIterator[list[Event]]:
        return self.inner.watch(from_revision)
