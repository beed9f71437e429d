"""A small asyncio client for the handful of API calls the scheduler makes.

Why not the official client: it is synchronous (a thread per in-flight call, and a thread per watch),
and the scheduler's throughput depends on many bindings in flight on one event loop. Why not the agent's
client: the control plane must not import the agent. This one is aiohttp with keep-alive connections,
JSON in and out, and an ApiError that keeps the server's Status.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp

from controlplane.scheduler.kubeconfig import Connection

USER_AGENT = "pykubelet-scheduler/0.1"
WATCH_SILENCE = 150.0  # seconds


class ApiError(Exception):
    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else str(body)[:300]
        super().__init__(f"{what}: HTTP {status}: {message}")

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


class ApiClient:
    def __init__(self, conn: Connection, max_connections: int = 64) -> None:
        self.conn = conn
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if conn.token:
            headers["Authorization"] = f"Bearer {conn.token}"
        connector = aiohttp.TCPConnector(ssl=conn.ssl_context if conn.ssl_context else False,
                                         limit=max_connections)
        self.session = aiohttp.ClientSession(headers=headers, connector=connector,
                                             timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))

    async def close(self) -> None:
        await self.session.close()

    def _url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = f"?{urlencode({k: v for k, v in params.items() if v is not None})}" if params else ""
        return f"{self.conn.server}{path}{query}"

    async def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                      content_type: str = "application/json", deadline: float = 30.0) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type} if data is not None else None
        async with self.session.request(method, self._url(path, params), data=data, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=deadline)) as resp:
            raw = await resp.read()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = raw.decode(errors="replace")
            if resp.status >= 400:
                raise ApiError(resp.status, payload, f"{method} {path}")
            return payload

    async def list(self, path: str, params: dict[str, Any] | None = None, page: int = 500) -> tuple[list[Any], str]:
        """All items (following `continue`) and the list's resourceVersion."""
        items: list[Any] = []
        token: str | None = None
        while True:
            out = await self.request("GET", path, params={**(params or {}), "limit": page, "continue": token},
                                     deadline=120)
            items.extend(out.get("items") or ())
            meta = out.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    async def watch(self, path: str, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Watch events as dicts until the server ends the stream. Errors before the stream starts
        raise ApiError; an in-stream error arrives as an ERROR event."""
        query = {**params, "watch": "true", "allowWatchBookmarks": "true"}
        # No total timeout (the server ends the stream after timeoutSeconds), but a silent connection is
        # dropped after WATCH_SILENCE: servers send a bookmark about every minute, so silence that long
        # means a dead peer, and the caller resumes from its last resourceVersion.
        async with self.session.get(self._url(path, query),
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=WATCH_SILENCE)) as resp:
            if resp.status >= 400:
                raw = await resp.read()
                try:
                    payload: Any = json.loads(raw)
                except ValueError:
                    payload = raw.decode(errors="replace")
                raise ApiError(resp.status, payload, f"WATCH {path}")
            buffer = b""
            async for chunk in resp.content.iter_any():
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
