"""A streamed answer (pods/log) over WebSocket, as upstream's StreamObject hands a ResourceStreamer to
wsstream's Reader when the request asks to upgrade: the subprotocols `binary.k8s.io` (and none: the bytes
as binary messages) and `base64.binary.k8s.io` (each chunk base64-encoded in a text message), the socket
closed when the stream ends. Anything the client sends is read and dropped. A plain request gets the
bytes as the chunked text/plain body it always had."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

BINARY = "binary.k8s.io"
BASE64 = "base64.binary.k8s.io"
PROTOCOLS = (BINARY, BASE64)


def wants_websocket(request: web.Request) -> bool:
    connection = {p.strip().lower() for p in request.headers.get("Connection", "").split(",")}
    return request.headers.get("Upgrade", "").lower() == "websocket" and "upgrade" in connection


async def stream(request: web.Request, chunks: AsyncIterator[bytes]) -> web.StreamResponse:
    """The chunks as the request wants them: WebSocket messages after an upgrade, else a text body."""
    if not wants_websocket(request):
        out = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await out.prepare(request)
        async for chunk in chunks:
            await out.write(chunk)
        await out.write_eof()
        return out
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    await ws.prepare(request)
    text = ws.ws_protocol == BASE64
    drain = asyncio.create_task(_discard(ws))
    try:
        async for chunk in chunks:
            if ws.closed:
                break
            if text:
                await ws.send_str(base64.b64encode(chunk).decode())
            else:
                await ws.send_bytes(chunk)
    except ConnectionResetError:
        pass
    finally:
        drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drain
        await ws.close()
    return ws


async def _discard(ws: web.WebSocketResponse) -> None:
    """Read what the client sends (its close frame ends a followed log early); the content is ignored."""
    async for message in ws:
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.ERROR):
            break
