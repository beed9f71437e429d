"""Read your own writes over an informer cache.

A sync writes a ReplicaSet or the Deployment's status, and the next sync (woken by another watch
stream) can run before the informer has delivered that write. Deciding from the older copy means a
write with an old resourceVersion, a 409, a retry with backoff: wasted requests and a slower rollout
(upstream's controller pays this often). So each object we wrote is remembered with the
resourceVersions it replaced; while the cache still shows one of those, the copy the API server
returned to us is the newer truth and is used instead. As soon as the cache shows anything else (our
write, or someone's later one) the entry is dropped and the cache is right again. Objects we created
are offered until the cache has them (at most `ttl` seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass
class _Entry:
    replaced: set[str]
    obj: Obj
    created: bool
    at: float


@dataclass
class OwnWrites:
    ttl: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _entries: dict[str, _Entry] = field(default_factory=dict)
    # The keys of the entries we created, apart: a sync asks for them, and a walk of every entry (one
    # per object written, across namespaces) made each sync cost as much as all the objects.
    _created: set[str] = field(default_factory=set)

    def wrote(self, key: str, replaced_rv: str, obj: Obj) -> None:
        """`obj` (as the server returned it) replaced the version `replaced_rv` of `key`."""
        entry = self._entries.get(key)
        replaced = {replaced_rv} | (entry.replaced | {_rv(entry.obj)} if entry else set())
        self._entries[key] = _Entry(replaced, obj, entry.created if entry else False, self.clock())

    def created(self, key: str, obj: Obj) -> None:
        self._entries[key] = _Entry(set(), obj, True, self.clock())
        self._created.add(key)

    def _drop(self, key: str) -> None:
        self._entries.pop(key, None)
        self._created.discard(key)

    def view(self, key: str, cached: Obj | None) -> Obj | None:
        """What to believe about `key`, given the cache's copy."""
        entry = self._entries.get(key)
        if entry is None:
            return cached
        if self.clock() - entry.at > self.ttl:
            self._drop(key)
            return cached
        if cached is None:
            if entry.created:
                return entry.obj  # not seen yet
            self._drop(key)
            return None
        if _rv(cached) in entry.replaced:
            return entry.obj
        self._drop(key)
        return cached

    def unseen_created(self, prefix: str, cached_keys: set[str]) -> list[Obj]:
        """Objects we created under `prefix` (`namespace/`) that the cache does not have yet."""
        found = []
        for key in list(self._created):
            if key.startswith(prefix) and key not in cached_keys:
                obj = self.view(key, None)
                if obj is not None:
                    found.append(obj)
        return found

    def forget(self, key: str) -> None:
        self._drop(key)

    def __len__(self) -> int:
        return len(self._entries)
