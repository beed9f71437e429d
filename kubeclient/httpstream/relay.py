"""Bytes moved between two connections in the transports' own callbacks, for the upgraded streams the
kubelet and the API server pass through (port-forward carries bulk data this way).

A relay over StreamReaders costs, per chunk, two copies (the reader's buffer in, a bytes slice out), a
task wake-up and an awaited drain. A TapReader is the same StreamReader until `divert()`: from then on
every chunk its transport delivers goes straight to the sink's `write` as it arrived (no copy, no task),
and the source transport is paused only while the sink holds more than HIGH_WATER bytes unsent, resumed
when the sink has drained (the flow control a copy loop gets from `await drain()`, paid only when the
far side is slow). Whatever was buffered before the diversion (bytes that came with the 101) goes
first.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

HIGH_WATER = 1 << 20  # bytes a sink may hold unsent before its source is paused
WEBSOCKET_FRAME_MAX = 256 * 1024  # payload per WebSocket message a websocket_sink writes
_BINARY_FIN = 0x82  # FIN + opcode 2 (RFC 6455 section 5.2)


@dataclass
class Sink:
    """Where a diverted stream's bytes go: `write` takes each chunk, `buffered` says how much the sink
    holds unsent, `drain` waits until it can take more."""

    write: Callable[[bytes], None]
    buffered: Callable[[], int]
    drain: Callable[[], Awaitable[None]]


def transport_sink(transport: asyncio.WriteTransport, drain: Callable[[], Awaitable[None]]) -> Sink:
    return Sink(transport.write, transport.get_write_buffer_size, drain)


def websocket_header(length: int) -> bytes:
    """The head of one unmasked (server to client) binary WebSocket frame of `length` bytes."""
    if length < 126:
        return struct.pack("!BB", _BINARY_FIN, length)
    if length < 1 << 16:
        return struct.pack("!BBH", _BINARY_FIN, 126, length)
    return struct.pack("!BBQ", _BINARY_FIN, 127, length)


def websocket_sink(transport: asyncio.WriteTransport, drain: Callable[[], Awaitable[None]]) -> Sink:
    """Each chunk as binary WebSocket messages (at most WEBSOCKET_FRAME_MAX each) on a server's
    connection, head and payload in one writelines (one flush of a TLS transport)."""

    def write(data: bytes) -> None:
        if transport.is_closing():
            raise ConnectionResetError("client connection closed")
        view = memoryview(data)
        for start in range(0, len(view), WEBSOCKET_FRAME_MAX):
            part = view[start : start + WEBSOCKET_FRAME_MAX]
            transport.writelines((websocket_header(len(part)), part))

    return Sink(write, transport.get_write_buffer_size, drain)


class TapReader(asyncio.StreamReader):
    """A StreamReader whose data can be diverted to a Sink (see the module's docstring)."""

    _sink: Sink | None = None
    _source: asyncio.Transport | asyncio.BaseTransport | None = None
    _ended: asyncio.Future[None] | None = None
    _waiting: asyncio.Task[None] | None = None

    def divert(self, source: asyncio.BaseTransport, sink: Sink) -> asyncio.Future[None]:
        """From now on, hand every chunk to `sink`; the future is done when this side ends (EOF or a
        lost connection). `source` is the transport that feeds this reader."""
        loop = asyncio.get_running_loop()
        self._ended = loop.create_future()
        self._source, self._sink = source, sink
        pending = bytes(self._buffer)
        self._buffer.clear()
        if pending:
            self._pass(pending)
        if self.at_eof() or self.exception() is not None:
            self._end()
        elif getattr(source, "is_reading", lambda: True)() is False:
            source.resume_reading()  # type: ignore[attr-defined]  # paused by the buffer's own limit
        return self._ended

    def feed_data(self, data: bytes) -> None:
        if self._sink is None:
            super().feed_data(data)
        elif data:
            self._pass(data)

    def feed_eof(self) -> None:
        super().feed_eof()
        self._end()

    def set_exception(self, exc: BaseException) -> None:
        super().set_exception(exc)
        self._end()

    def stop(self) -> None:
        """No more diverted writes (the relay is being torn down)."""
        if self._waiting is not None:
            self._waiting.cancel()
        self._sink = None

    def _pass(self, data: bytes) -> None:
        assert self._sink is not None
        try:
            self._sink.write(data)
        except (ConnectionError, OSError, RuntimeError):
            self._end()
            return
        if self._waiting is None and self._sink.buffered() > HIGH_WATER:
            with contextlib.suppress(AttributeError, RuntimeError):
                self._source.pause_reading()  # type: ignore[union-attr]
            self._waiting = asyncio.ensure_future(self._resume_after_drain())

    async def _resume_after_drain(self) -> None:
        assert self._sink is not None
        try:
            await self._sink.drain()
        except (ConnectionError, OSError, RuntimeError):
            self._end()
            return
        finally:
            self._waiting = None
        with contextlib.suppress(AttributeError, RuntimeError):
            self._source.resume_reading()  # type: ignore[union-attr]

    def _end(self) -> None:
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)


async def open_tap_connection(
    host: str, port: int, ssl: object = None, limit: int = 1 << 16
) -> tuple[TapReader, asyncio.StreamWriter]:
    """asyncio.open_connection with a TapReader."""
    loop = asyncio.get_running_loop()
    reader = TapReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport, _ = await loop.create_connection(lambda: protocol, host, port, ssl=ssl)  # type: ignore[arg-type]
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


__all__ = [
    "HIGH_WATER",
    "Sink",
    "TapReader",
    "open_tap_connection",
    "transport_sink",
    "websocket_header",
    "websocket_sink",
]
