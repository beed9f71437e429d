"""Service-account tokens for projected volumes, as upstream's kubelet token manager
(pkg/kubelet/token/token_manager.go) keeps them: one per (pod, account, audiences, lifetime), asked
for through TokenRequest bound to the pod, reused until it is due, and due at 80 % of its lifetime or
24 hours after it was issued, whichever comes first (less a jitter of up to 10 s, drawn once per token,
so a node's pods do not all refresh in the same second). When a refresh fails the token in hand is
used while it is still valid, and the next try waits RETRY_AFTER_FAILURE seconds.

The clock is a parameter, so the refresh rule is tested without waiting for it.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from agent.kube.tokens import IssuedToken
from kubeclient.errors import ApiError

log = logging.getLogger("agent.volumes.tokens")

MAX_TTL = 24 * 3600.0
MAX_JITTER = 10.0
RETRY_AFTER_FAILURE = 30.0
# (namespace, account, audiences, expirationSeconds, pod name, pod uid) -> the token the API issued
Requester = Callable[[str, str, list[str], int, str, str], Awaitable[IssuedToken]]
Key = tuple[str, str, tuple[str, ...], int, str]


def refresh_at(token: IssuedToken, jitter: float = 0.0) -> float:
    """When a token is due: at 80 % of its lifetime, or 24 h after it was issued if that is sooner."""
    issued = token.expires_at - token.expiration_seconds
    return min(issued + MAX_TTL, token.expires_at - token.expiration_seconds * 20 // 100) - jitter


@dataclass(frozen=True)
class _Held:
    token: IssuedToken
    jitter: float
    not_before: float = 0.0  # after a failed refresh: when to try again

    @property
    def due(self) -> float:
        return max(refresh_at(self.token, self.jitter), self.not_before)


class TokenManager:
    def __init__(
        self,
        request: Requester,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = lambda: random.uniform(0, MAX_JITTER),
    ) -> None:
        self._request = request
        self._clock = clock
        self._jitter = jitter
        self._held: dict[Key, _Held] = {}

    async def get(
        self, namespace: str, account: str, audiences: list[str], expiration: int, pod_name: str, pod_uid: str
    ) -> str:
        key: Key = (namespace, account, tuple(audiences), expiration, pod_uid)
        held = self._held.get(key)
        now = self._clock()
        if held is not None and now < held.due:
            return held.token.token
        try:
            fresh = await self._request(namespace, account, list(audiences), expiration, pod_name, pod_uid)
        except ApiError as err:
            if held is not None and now < held.token.expires_at:
                log.warning(
                    "token refresh failed, the current one is still valid pod=%s/%s account=%s error=%r",
                    namespace,
                    pod_name,
                    account,
                    str(err),
                )
                self._held[key] = _Held(held.token, held.jitter, now + RETRY_AFTER_FAILURE)
                return held.token.token
            raise
        self._held[key] = _Held(fresh, self._jitter())
        self._drop_expired(now)
        return fresh.token

    def due(self, pod_uid: str) -> bool:
        """Whether one of the pod's tokens is due for a refresh."""
        now = self._clock()
        return any(k[4] == pod_uid and now >= h.due for k, h in self._held.items())

    def next_refresh_in(self, pod_uid: str) -> float | None:
        """Seconds until the pod's first token is due (None: it holds none)."""
        dues = [h.due for k, h in self._held.items() if k[4] == pod_uid]
        return max(0.0, min(dues) - self._clock()) if dues else None

    def forget(self, pod_uid: str) -> None:
        for key in [k for k in self._held if k[4] == pod_uid]:
            del self._held[key]

    def _drop_expired(self, now: float) -> None:
        for key in [k for k, h in self._held.items() if h.token.expires_at <= now]:
            del self._held[key]


__all__ = ["MAX_TTL", "RETRY_AFTER_FAILURE", "TokenManager", "refresh_at"]
