"""The webhook token authenticator (upstream's --authentication-token-webhook-config-file): a bearer
token no other authenticator claims is sent in a TokenReview (authentication.k8s.io/v1, or v1beta1 with
--authentication-token-webhook-version) to the service the kubeconfig-format file names, over TLS with its
CA and client certificate; the answer's status.user is the user. Answers, yes or no, are kept for
--authentication-token-webhook-cache-ttl (2m), keyed by an HMAC of the token. A webhook that cannot be
reached or answers nonsense makes its tokens a 401; the rest of the API goes on."""

from __future__ import annotations

import json
import logging
from typing import Any

import aiohttp

from controlplane.apiserver.authn import TokenResult, UserInfo
from controlplane.apiserver.tokencache import TokenCache
from kubeclient.config import ClusterConfig

log = logging.getLogger("controlplane.apiserver.tokenwebhook")

TIMEOUT = 30.0  # upstream's request timeout for the webhook


class TokenWebhook:
    def __init__(self, cluster: ClusterConfig, cache_ttl: float = 120.0, version: str = "v1") -> None:
        self.cluster = cluster
        self.version = version
        self._ssl = cluster.ssl_context()
        self._cache: TokenCache[TokenResult] = TokenCache(cache_ttl)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def review(self, token: str, audiences: tuple[str, ...]) -> TokenResult:
        cached = self._cache.get(token, audiences)
        if cached is not None:
            return cached
        result = await self._ask(token, audiences)
        if result.error.startswith("webhook:"):  # the webhook's own failure is not an answer to keep
            return result
        self._cache.put(token, audiences, result)
        return result

    async def _ask(self, token: str, audiences: tuple[str, ...]) -> TokenResult:
        api_version = f"authentication.k8s.io/{self.version}"
        body: dict[str, Any] = {"apiVersion": api_version, "kind": "TokenReview", "spec": {"token": token}}
        if audiences:
            body["spec"]["audiences"] = list(audiences)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        try:
            async with self._session.post(
                self.cluster.server,
                data=json.dumps(body),
                headers={"Content-Type": "application/json"},
                ssl=self._ssl,
            ) as resp:
                text = await resp.read()
                if resp.status >= 300:
                    return TokenResult(None, error=f"webhook: {resp.status} from the token webhook")
                answer = json.loads(text)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
            log.warning("event=token_webhook_failed error=%r", type(err).__name__)
            return TokenResult(None, error=f"webhook: {type(err).__name__}")
        status = answer.get("status") if isinstance(answer, dict) else None
        if not isinstance(status, dict) or answer.get("kind") != "TokenReview":
            return TokenResult(None, error="webhook: the answer is not a TokenReview")
        if not status.get("authenticated"):
            return TokenResult(None, error=str(status.get("error") or "token webhook: not authenticated"))
        user = status.get("user") or {}
        extra = tuple(
            sorted((str(k), tuple(str(x) for x in v or ())) for k, v in (user.get("extra") or {}).items())
        )
        groups = tuple(str(g) for g in user.get("groups") or ())
        info = UserInfo(
            str(user.get("username") or ""),
            str(user.get("uid") or ""),
            (*groups, "system:authenticated"),
            extra,
        )
        if not info.name:
            return TokenResult(None, error="token webhook: no username")
        answered = tuple(status.get("audiences") or ()) or audiences
        return TokenResult(info, answered)
