"""WebSocket v5.channel.k8s.io to SPDY, as upstream's StreamTranslatorHandler (apiserver
pkg/util/proxy/streamtranslator.go): kubectl >= 1.30 and the official clients speak v5 over WebSocket,
whose CLOSE signal ([255, 0]) half-closes stdin; runtimes older than v5 cannot hear that over
WebSocket, so the API server ends the WebSocket itself and talks remotecommand v4 over SPDY to the
kubelet (who proxies it to the runtime).

Channels map one to one: stdin (0) and resize (4) go to the SPDY streams of that streamType, stdout (1)
and stderr (2) come back from theirs, and the error stream's Status (the exit code as a NonZeroExitCode
cause, or Success) is sent on channel 3 once the command has finished. Refusals by the kubelet (a
container not running, ...) arrive as an InternalError Status on channel 3, as upstream's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from kubeclient.httpstream import protocols as P
from kubeclient.httpstream.spdy import SpdyClient, SpdyError
from kubeclient.httpstream.upgrade import UpgradeError, dial

log = logging.getLogger("controlplane.apiserver.streamtranslator")

SUCCESS = json.dumps({"metadata": {}, "status": "Success"}).encode()
# remotecommand versions the SPDY side offers, newest first (runtimes answer v4 today).
SPDY_PROTOCOLS = (P.STREAM_V5, P.STREAM_V4, "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")


@dataclass(frozen=True)
class Streams:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    def channels(self) -> list[int]:
        """The SPDY streams remotecommand v4 expects, in client-go's order (error first)."""
        wanted = [P.ERROR]
        wanted += [P.STDIN] if self.stdin else []
        wanted += [P.STDOUT] if self.stdout else []
        wanted += [P.STDERR] if self.stderr and not self.tty else []
        wanted += [P.RESIZE] if self.tty else []
        return wanted


def internal_error(message: str) -> bytes:
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {message}",
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }
    ).encode()


def refusal_message(body: bytes) -> str:
    """What the kubelet's refusal says: its Status's message, else its text (client-go's wording)."""
    try:
        status = json.loads(body)
        if isinstance(status, dict) and status.get("kind") == "Status" and status.get("message"):
            return str(status["message"])
    except ValueError:
        pass
    return f"unable to upgrade connection: {body.decode(errors='replace').strip()}"


class _Session:
    """One translated exec or attach: the WebSocket to the client, the SPDY session to the kubelet."""

    def __init__(self, ws: web.WebSocketResponse, spdy: SpdyClient, streams: Streams) -> None:
        self.ws, self.spdy, self.streams = ws, spdy, streams
        self.ids: dict[int, int] = {}  # channel -> SPDY stream
        self.channel_of: dict[int, int] = {}
        self.status = b""
        self.open_outputs: set[int] = set()
        self.error_done = False
        self.finished = asyncio.Event()

    async def open(self) -> None:
        for channel in self.streams.channels():
            sid = await self.spdy.open_stream([(P.STREAM_TYPE_HEADER, P.SPDY_STREAM_TYPES[channel])])
            self.ids[channel], self.channel_of[sid] = sid, channel
        self.open_outputs = {sid for ch, sid in self.ids.items() if ch in (P.STDOUT, P.STDERR)}

    async def on_data(self, sid: int, data: bytes, fin: bool) -> None:
        channel = self.channel_of.get(sid)
        if channel in (P.STDOUT, P.STDERR) and data:
            await self.ws.send_bytes(bytes([channel]) + data)
        elif channel == P.ERROR:
            self.status += data
        if fin:
            self.open_outputs.discard(sid)
            self.error_done = self.error_done or channel == P.ERROR
            if self.error_done and not self.open_outputs:
                self.finished.set()

    async def pump_client(self) -> None:
        """Client to kubelet: stdin, resize and the CLOSE signal, until the client goes."""
        async for msg in self.ws:
            # Text messages count as their UTF-8 bytes, as x/net/websocket's Message.Receive reads them
            # (the official Python client sends stdin as text).
            if msg.type == aiohttp.WSMsgType.TEXT:
                data = msg.data.encode()
            elif msg.type == aiohttp.WSMsgType.BINARY:
                data = msg.data
            else:
                continue
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == P.CLOSE_SIGNAL:
                if payload[:1] == bytes([P.STDIN]) and P.STDIN in self.ids:
                    await self.spdy.close_stream(self.ids[P.STDIN])
            elif channel in (P.STDIN, P.RESIZE) and channel in self.ids and payload:
                await self.spdy.write(self.ids[channel], payload)


async def translate(
    request: web.Request, url: str, ssl_context: ssl.SSLContext | None, streams: Streams
) -> web.StreamResponse:
    ws = web.WebSocketResponse(protocols=(P.STREAM_V5,), max_msg_size=0)
    await ws.prepare(request)
    headers = [("Connection", "Upgrade"), ("Upgrade", P.SPDY_31)]
    headers += [(P.PROTOCOL_VERSION_HEADER, p) for p in SPDY_PROTOCOLS]
    try:
        backend = await dial(url, "POST", headers, ssl_context)
    except UpgradeError as err:
        await _finish(ws, internal_error(str(err)))
        return ws
    if backend.status != 101:
        body = await backend.body()
        backend.close()
        await _finish(ws, internal_error(refusal_message(body)))
        return ws
    spdy = SpdyClient(backend.reader, backend.writer)
    session = _Session(ws, spdy, streams)
    reader = asyncio.ensure_future(spdy.run(session.on_data))
    client: asyncio.Future[None] | None = None
    try:
        try:
            await session.open()
        except (SpdyError, ConnectionError) as err:
            await _finish(ws, internal_error(str(err)))
            return ws
        client = asyncio.ensure_future(session.pump_client())
        finished = asyncio.ensure_future(session.finished.wait())
        await asyncio.wait([finished, reader, client], return_when=asyncio.FIRST_COMPLETED)
        finished.cancel()
        if session.finished.is_set() or reader.done():
            # Ended by the kubelet: the command's Status (an empty error stream is a success).
            if session.error_done:
                await _finish(ws, session.status or SUCCESS)
            else:
                await _finish(
                    ws,
                    internal_error("error reading from error stream: the connection to the kubelet closed"),
                )
    finally:
        for task in (client, reader):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, SpdyError, ConnectionError, OSError):
                    await task
        await spdy.close()
        if not ws.closed:
            with contextlib.suppress(ConnectionError, OSError):
                await ws.close()
    return ws


async def _finish(ws: web.WebSocketResponse, status: bytes) -> None:
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        await ws.send_bytes(bytes([P.ERROR]) + status)
        await ws.close()
