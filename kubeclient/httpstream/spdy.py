"""The client end of a SPDY/3.1 session, as much as Kubernetes' remotecommand needs: the API server
turns a WebSocket exec (v5.channel.k8s.io) into SPDY streams to the kubelet, as upstream's
StreamTranslator does, because only SPDY can half-close stdin on a runtime that predates v5.

No maintained Python SPDY library exists, so this is the smallest correct subset of
draft-mbelshe-spdy-3.1 that talks to moby/spdystream (what kubelets and runtimes run):
- frames: SYN_STREAM (client streams, odd ids), SYN_REPLY, DATA (FIN half-closes), RST_STREAM, PING
  (echoed), GOAWAY; SETTINGS, HEADERS and WINDOW_UPDATE are read and ignored. spdystream does no flow
  control either, so none is done here.
- header blocks are zlib streams, one per direction for the whole session. Ours are compressed
  without the spec's preset dictionary (zlib marks that in the stream header, and Go's reader accepts
  it); the peer's are never needed by a client of remotecommand, so they are skipped, not inflated.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
MAX_DATA = 32 * 1024  # bytes per DATA frame we send
MAX_FRAME = 1 << 24


class SpdyError(Exception):
    pass


@dataclass(frozen=True)
class Frame:
    control: bool
    kind: int  # control frame type, or 0 for DATA
    stream_id: int  # 0 for session frames
    flags: int
    payload: bytes

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


def header_block(headers: Sequence[tuple[str, str]]) -> bytes:
    """The uncompressed name/value block: names lowercase, values of one name joined by NUL."""
    joined: dict[str, list[str]] = {}
    for name, value in headers:
        joined.setdefault(name.lower(), []).append(value)
    out = [struct.pack(">I", len(joined))]
    for name, values in joined.items():
        n, v = name.encode(), "\0".join(values).encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def parse_header_block(raw: bytes) -> list[tuple[str, str]]:
    (count,), pos, out = struct.unpack_from(">I", raw), 4, []
    for _ in range(count):
        (n,) = struct.unpack_from(">I", raw, pos)
        name = raw[pos + 4 : pos + 4 + n].decode()
        pos += 4 + n
        (v,) = struct.unpack_from(">I", raw, pos)
        out += [(name, value) for value in raw[pos + 4 : pos + 4 + v].decode().split("\0")]
        pos += 4 + v
    return out


def control_frame(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, flags: int, data: bytes) -> bytes:
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of the connection."""
    try:
        head = await reader.readexactly(8)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise SpdyError("connection closed inside a frame header") from None
        return None
    first, second = struct.unpack(">II", head)
    flags, length = second >> 24, second & 0xFFFFFF
    payload = await reader.readexactly(length)
    if first & 0x80000000:
        version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        stream_id = (
            struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            if kind in (SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS, WINDOW_UPDATE) and len(payload) >= 4
            else 0
        )
        return Frame(True, kind, stream_id, flags, payload)
    return Frame(False, 0, first & 0x7FFFFFFF, flags, payload)


DataHandler = Callable[[int, bytes, bool], Awaitable[None]]


class SpdyClient:
    """One client session over an upgraded connection. `run(on_data)` reads frames until the peer
    closes; `open_stream` waits for the peer's SYN_REPLY (as client-go does) before it returns."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._next_id = 1
        self._compressor = zlib.compressobj(9)
        self._replies: dict[int, asyncio.Future[None]] = {}
        self.closed = asyncio.Event()
        self.reset: dict[int, int] = {}  # stream -> RST_STREAM status the peer sent

    async def _send(self, frame: bytes) -> None:
        if self.writer.is_closing():
            raise ConnectionResetError("SPDY connection closed")
        self.writer.write(frame)
        await self.writer.drain()

    async def open_stream(self, headers: Sequence[tuple[str, str]], reply_timeout: float = 30.0) -> int:
        stream_id, self._next_id = self._next_id, self._next_id + 2
        block = self._compressor.compress(header_block(headers)) + self._compressor.flush(zlib.Z_SYNC_FLUSH)
        reply: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._replies[stream_id] = reply
        # stream id, associated-to 0, priority 0 and slot 0, then the header block.
        await self._send(control_frame(SYN_STREAM, 0, struct.pack(">IIH", stream_id, 0, 0) + block))
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            await asyncio.wait([reply, closed], timeout=reply_timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if not reply.done():
            raise SpdyError(f"no reply for stream {stream_id}")
        reply.result()
        return stream_id

    async def write(self, stream_id: int, data: bytes) -> None:
        for start in range(0, len(data), MAX_DATA):
            await self._send(data_frame(stream_id, 0, data[start : start + MAX_DATA]))

    async def close_stream(self, stream_id: int) -> None:
        """Half-close: an empty DATA frame with FIN (spdystream's Stream.Close)."""
        await self._send(data_frame(stream_id, FLAG_FIN, b""))

    async def run(self, on_data: DataHandler) -> None:
        """Read frames, handing DATA to `on_data(stream, data, fin)` in order, until the connection ends."""
        try:
            while (frame := await read_frame(self.reader)) is not None:
                if not frame.control:
                    await on_data(frame.stream_id, frame.payload, frame.fin)
                elif frame.kind == SYN_REPLY:
                    self._resolve(frame.stream_id, None)
                    if frame.fin:
                        await on_data(frame.stream_id, b"", True)
                elif frame.kind == RST_STREAM:
                    status = struct.unpack_from(">I", frame.payload, 4)[0] if len(frame.payload) >= 8 else 0
                    self.reset[frame.stream_id] = status
                    self._resolve(
                        frame.stream_id, SpdyError(f"stream {frame.stream_id} reset (status {status})")
                    )
                    await on_data(frame.stream_id, b"", True)
                elif frame.kind == PING and len(frame.payload) == 4:
                    if struct.unpack(">I", frame.payload)[0] % 2 == 0:  # the server's pings are even
                        await self._send(control_frame(PING, 0, frame.payload))
                elif frame.kind == GOAWAY:
                    continue  # streams already open finish; we open no more
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as err:
            raise SpdyError(f"SPDY connection lost: {err}") from None
        finally:
            self.closed.set()
            for stream_id in list(self._replies):
                self._resolve(stream_id, SpdyError("SPDY connection closed"))

    def _resolve(self, stream_id: int, error: Exception | None) -> None:
        reply = self._replies.pop(stream_id, None)
        if reply is not None and not reply.done():
            if error is None:
                reply.set_result(None)
            else:
                reply.set_exception(error)

    async def close(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            if not self.writer.is_closing():
                self.writer.write(control_frame(GOAWAY, 0, struct.pack(">II", 0, 0)))
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            async with asyncio.timeout(2.0):  # a peer that never answers TLS's close
                await self.writer.wait_closed()


__all__ = [
    "Frame",
    "SpdyClient",
    "SpdyError",
    "control_frame",
    "data_frame",
    "header_block",
    "parse_header_block",
    "read_frame",
]
