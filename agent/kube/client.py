"""An asyncio REST client for the Kubernetes API over JSON dicts.

The official Python client blocks, and the agent shares one event loop with CRI and its pod workers, so
this is a thin aiohttp client instead: one connection pool, a token-bucket rate limit (upstream's
kubeAPIQPS/kubeAPIBurst), and retries with backoff for the failures that are worth retrying
(connection errors, 429, 5xx). Errors come out as `ApiError` carrying the API's Status.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from agent.kube.backoff import Backoff
from agent.kube.config import ClusterConfig
from agent.kube.ratelimit import TokenBucket

log = logging.getLogger("agent.kube")

USER_AGENT = "pykubelet/0.1.0"
RETRYABLE_STATUS = {429, 500, 502, 503, 504}
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """The API answered with an error Status (or could not be reached: status 0)."""

    def __init__(self, status: int, reason: str, message: str, body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        super().__init__(f"{status} {reason}: {message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410


class KubeClient:
    def __init__(
        self,
        config: ClusterConfig,
        qps: float = 50.0,
        burst: int = 100,
        max_attempts: int = 5,
        request_timeout: float = 30.0,
    ) -> None:
        self.config = config
        self.limiter = TokenBucket(qps, burst)
        self.max_attempts = max_attempts
        self.request_timeout = request_timeout
        self._ssl = config.ssl_context()
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False, limit=64)
            headers = {"User-Agent": USER_AGENT, "Accept": JSON}
            auth = None
            if self.config.username and self.config.password is not None:
                auth = aiohttp.BasicAuth(self.config.username, self.config.password)
            self._session = aiohttp.ClientSession(connector=connector, headers=headers, auth=auth)
        return self._session

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers: dict[str, str] = {}
        token = self.config.bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        retry: bool = True,
    ) -> dict[str, Any]:
        """One API call with rate limit and retries; returns the decoded JSON body."""
        backoff = Backoff(initial=0.2, maximum=5.0)
        attempts = self.max_attempts if retry else 1
        data = None if body is None else json.dumps(body).encode()
        url = self.config.server + path
        clean_params = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        for attempt in range(1, attempts + 1):
            await self.limiter.acquire()
            try:
                async with self._get_session().request(
                    method,
                    url,
                    params=clean_params,
                    data=data,
                    headers=self._headers(content_type if data is not None else None),
                    timeout=aiohttp.ClientTimeout(total=self.request_timeout),
                ) as resp:
                    raw = await resp.read()
                    if resp.status < 400:
                        return json.loads(raw) if raw else {}
                    err = _api_error(resp.status, raw)
                    if resp.status not in RETRYABLE_STATUS or attempt == attempts:
                        raise err
                    delay = _retry_after(resp.headers.get("Retry-After")) or backoff.next()
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if attempt == attempts:
                    raise ApiError(0, "Unreachable", f"{method} {path}: {exc or type(exc).__name__}") from None
                delay = backoff.next()
            log.debug("api retry method=%s path=%s attempt=%d delay=%.2f", method, path, attempt, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: Any, content_type: str = STRATEGIC_PATCH) -> dict[str, Any]:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request("DELETE", path, body=body)

    async def watch(
        self, path: str, params: Mapping[str, Any], idle_timeout: float = 330.0
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events ({type, object}) from one watch request until the server ends it.

        An ERROR event (for example 410 Gone for a too-old resourceVersion) is raised as ApiError. If no
        line arrives for `idle_timeout` seconds the stream is taken as dead (a half-open connection).
        """
        await self.limiter.acquire()
        query = {k: _param(v) for k, v in {**params, "watch": "true"}.items() if v is not None}
        try:
            async with self._get_session().get(
                self.config.server + path,
                params=query,
                headers=self._headers(None),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=idle_timeout),
            ) as resp:
                if resp.status >= 400:
                    raise _api_error(resp.status, await resp.read())
                async for line in _lines(resp.content):
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        raise ApiError(
                            int(status.get("code") or 500),
                            status.get("reason", ""),
                            status.get("message", ""),
                            status,
                        )
                    yield event
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError, ValueError) as exc:
            raise ApiError(0, "Unreachable", f"watch {path}: {exc or type(exc).__name__}") from None


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Newline-delimited records of any length (aiohttp's readline caps a line at 64 KiB, and one pod
    with a large last-applied annotation can exceed that)."""
    buf = b""
    async for chunk in stream.iter_any():
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


def _param(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _retry_after(value: str | None) -> float | None:
    try:
        return min(float(value), 10.0) if value else None
    except ValueError:
        return None


def _api_error(status: int, raw: bytes) -> ApiError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    return ApiError(
        status,
        body.get("reason", "") or "",
        body.get("message", "") or raw.decode(errors="replace")[:200],
        body,
    )
