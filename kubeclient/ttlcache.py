"""A small map whose entries expire: what the servers remember about credentials and decisions for a
while (the API server's authenticated tokens, the kubelet API's TokenReview and SubjectAccessReview
answers). Bounded, so a flood of distinct keys cannot grow it forever: the oldest entry goes first."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    def __init__(self, clock: Callable[[], float] = time.monotonic, limit: int = 4096) -> None:
        self.clock = clock
        self.limit = limit
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) while the entry lives; (False, None) otherwise (a cached None is (True, None))."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if self.clock() >= entry[0]:
            del self._entries[key]
            return False, None
        return True, entry[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._entries[key] = (self.clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def keys(self) -> list[K]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["TTLCache"]
