"""Upstream's cached token authenticator (k8s.io/apiserver/pkg/authentication/token/cache): a bearer
token that authenticated is remembered for `success_ttl` (10 s, kube-apiserver's default), so a client
calling many times a second pays the signature check and the bound-object lookups once per window;
failures are not cached (upstream's failure TTL is 0). The price is upstream's too: a token whose pod
was deleted keeps working until its entry expires.

Entries are keyed by an HMAC of the token and the audiences asked for, with a key made at start, so
the cache never holds a token. The cache is bounded (the oldest entry goes first)."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from kubeclient.ttlcache import TTLCache

T = TypeVar("T")

SUCCESS_TTL = 10.0
MAX_ENTRIES = 4096


class TokenCache(Generic[T]):
    def __init__(
        self,
        ttl: float = SUCCESS_TTL,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._key = os.urandom(32)
        self._entries: TTLCache[bytes, T] = TTLCache(clock, max_entries)

    def _digest(self, token: str, audiences: tuple[str, ...]) -> bytes:
        message = token.encode() + b"\x00" + "\x00".join(audiences).encode()
        return hmac.new(self._key, message, hashlib.sha256).digest()

    def get(self, token: str, audiences: tuple[str, ...]) -> T | None:
        if self.ttl <= 0:
            return None
        return self._entries.get(self._digest(token, audiences))[1]

    def put(self, token: str, audiences: tuple[str, ...], value: T) -> None:
        self._entries.put(self._digest(token, audiences), value, self.ttl)

    def __len__(self) -> int:
        return len(self._entries)


__all__ = ["MAX_ENTRIES", "SUCCESS_TTL", "TokenCache"]
