"""HTTP/1.1 upgrades proxied byte for byte, as apimachinery's UpgradeAwareHandler does for the kubelet
(to the runtime's streaming server) and the API server (to the kubelet).

The backend is dialled with the caller's upgrade request (its Connection, Upgrade, WebSocket and
X-Stream-Protocol-Version headers; never its credentials); when it answers 101 Switching Protocols the
same 101 goes back to the client and the two connections are spliced until either side closes, so
whatever protocol they agreed on (SPDY/3.1, WebSocket with any subprotocol) passes through untouched.
Any other answer (a Status saying why) is returned as an ordinary response. The splice moves each chunk
in the transports' callbacks (relay.py): no copy loop, no task per chunk, flow control only when a side
is slow.

aiohttp has no public hijack: the request's protocol is given a payload parser that feeds a StreamReader
(the same seam its WebSocketResponse uses) before the 101 is written, so not one byte of the upgraded
stream reaches the HTTP parser.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from multidict import CIMultiDict

from kubeclient.httpstream.protocols import Headers
from kubeclient.httpstream.relay import Sink, TapReader, open_tap_connection, transport_sink

CHUNK = 256 * 1024  # per read: fewer, larger WebSocket messages and TLS writes
# What an upgrade handshake needs of the client's request; everything else (Authorization,
# Impersonate-*, cookies) stays behind: the proxy dials with its own identity.
FORWARDED = (
    "Connection",
    "Upgrade",
    "X-Stream-Protocol-Version",
    "Sec-WebSocket-Key",
    "Sec-WebSocket-Version",
    "Sec-WebSocket-Protocol",
    "User-Agent",
)
# Headers of the backend's 101 that the server writes itself.
_OWN = ("content-length", "transfer-encoding", "date", "server")


class UpgradeError(Exception):
    """The backend could not be reached or answered garbage."""


def forwarded_headers(headers: Headers) -> list[tuple[str, str]]:
    return [(name, value) for name in FORWARDED for value in headers.getall(name, [])]


@dataclass
class BackendResponse:
    status: int
    reason: str
    headers: CIMultiDict[str]
    reader: TapReader
    writer: asyncio.StreamWriter

    async def body(self, limit: int = 1 << 20, wait: float = 10.0) -> bytes:
        """The response body of a refused upgrade (Content-Length, chunked or up to EOF; capped)."""

        async def read() -> bytes:
            if "Content-Length" in self.headers:
                return await self.reader.readexactly(min(int(self.headers["Content-Length"]), limit))
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while len(out) < limit:
                    size = int((await self.reader.readline()).split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        break
                    out += await self.reader.readexactly(size)
                    await self.reader.readline()
                return out[:limit]
            return await self.reader.read(limit)

        try:
            async with asyncio.timeout(wait):
                return await read()
        except (asyncio.IncompleteReadError, TimeoutError, ValueError, OSError):
            return b""

    def close(self) -> None:
        self.writer.close()


async def dial(
    url: str,
    method: str,
    headers: Iterable[tuple[str, str]],
    ssl_context: ssl.SSLContext | None = None,
    wait: float = 10.0,
) -> BackendResponse:
    """Send an upgrade request to `url` and read the answer's head (the body, if any, is left unread)."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        async with asyncio.timeout(wait):
            reader, writer = await open_tap_connection(
                host, port, ssl=ssl_context if secure else None, limit=CHUNK * 2
            )
    except (OSError, TimeoutError) as err:
        raise UpgradeError(f"error dialing backend: {err or type(err).__name__}") from None
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {netloc}"]
    lines += [f"{name}: {value}" for name, value in headers]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    try:
        await writer.drain()
        async with asyncio.timeout(wait):
            head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        _version, code, *reason = status_line.split(" ", 2)
        parsed: CIMultiDict[str] = CIMultiDict()
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                parsed.add(name.strip(), value.strip())
        return BackendResponse(int(code), reason[0] if reason else "", parsed, reader, writer)
    except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as err:
        writer.close()
        raise UpgradeError(f"error reading the backend's answer: {err or type(err).__name__}") from None


class _Feed:
    """A payload parser for aiohttp's protocol that hands every byte to a StreamReader."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.reader.feed_data(data)
        return False, b""

    def feed_eof(self) -> None:
        self.reader.feed_eof()


@dataclass
class Hijacked:
    """The client's connection after the 101: raw bytes both ways. The handler returns `response`."""

    response: web.StreamResponse
    reader: TapReader
    _request: web.Request = field(repr=False)
    _writer: AbstractStreamWriter = field(repr=False)

    def write(self, data: bytes) -> None:
        transport = self._request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client connection closed")
        transport.write(data)

    async def drain(self) -> None:
        await self._writer.drain()

    def buffered(self) -> int:
        transport = self._request.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    @property
    def transport(self) -> asyncio.Transport:
        transport = self._request.transport
        if transport is None:
            raise ConnectionResetError("client connection closed")
        return transport  # type: ignore[return-value]

    def sink(self) -> Sink:
        return Sink(self.write, self.buffered, self.drain)


async def switch_protocols(request: web.Request, headers: Iterable[tuple[str, str]]) -> Hijacked:
    """Answer 101 with `headers` and take the connection over."""
    reader = TapReader(limit=CHUNK * 4)
    if request.transport is None:
        raise ConnectionResetError("client connection closed")
    reader.set_transport(request.transport)
    request.protocol.set_parser(_Feed(reader))  # type: ignore[arg-type]
    response = web.StreamResponse(status=101, headers=CIMultiDict(headers))
    response.force_close()
    writer = await response.prepare(request)
    return Hijacked(response, reader, request, writer)


async def splice(client: Hijacked, backend: BackendResponse) -> None:
    """Move bytes both ways until either side closes; then close the backend (the client's connection
    closes when the handler returns)."""
    ends: list[asyncio.Future[None]] = []
    try:
        ends.append(backend.reader.divert(backend.writer.transport, client.sink()))
        ends.append(
            client.reader.divert(
                client.transport, transport_sink(backend.writer.transport, backend.writer.drain)
            )
        )
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
    finally:
        client.reader.stop()
        backend.reader.stop()
        for end in ends:
            end.cancel()
        backend.close()


async def proxy_upgrade(
    request: web.Request,
    url: str,
    ssl_context: ssl.SSLContext | None = None,
    headers: Iterable[tuple[str, str]] | None = None,
) -> web.StreamResponse:
    """UpgradeAwareHandler: the backend's 101 spliced to the client, or its refusal passed back.
    Raises UpgradeError when the backend cannot be reached."""
    sent = list(headers) if headers is not None else forwarded_headers(request.headers)
    backend = await dial(url, request.method, sent, ssl_context)
    if backend.status != 101:
        body = await backend.body()
        backend.close()
        return web.Response(
            status=backend.status,
            body=body,
            headers={"Content-Type": backend.headers.get("Content-Type", "text/plain; charset=utf-8")},
        )
    try:
        hijacked = await switch_protocols(
            request, [(k, v) for k, v in backend.headers.items() if k.lower() not in _OWN]
        )
    except (ConnectionError, OSError):
        backend.close()
        raise
    await splice(hijacked, backend)
    return hijacked.response


__all__ = [
    "BackendResponse",
    "Hijacked",
    "UpgradeError",
    "dial",
    "forwarded_headers",
    "proxy_upgrade",
    "splice",
    "switch_protocols",
]
