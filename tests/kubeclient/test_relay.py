"""kubeclient/httpstream/relay.py: a diverted TapReader hands its bytes to the sink in order (what was
buffered before the diversion first), pauses its source while the sink holds more than HIGH_WATER and
resumes it once the sink drained, ends on EOF; WebSocket frame heads for the three length forms; and a
large transfer through the upgrade proxy arrives whole while the client reads slowly (real sockets)."""

from __future__ import annotations

import asyncio
import hashlib
import os

from aiohttp import web

from kubeclient.httpstream.relay import HIGH_WATER, Sink, TapReader, websocket_header, websocket_sink
from kubeclient.httpstream.upgrade import proxy_upgrade


class FakeTransport:
    def __init__(self) -> None:
        self.reading = True
        self.pauses = 0

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        self.reading = True


class SlowSink:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.held = 0
        self.drained = asyncio.Event()

    def sink(self) -> Sink:
        def write(data: bytes) -> None:
            self.got.append(bytes(data))
            self.held += len(data)

        async def drain() -> None:
            await self.drained.wait()
            self.held = 0

        return Sink(write, lambda: self.held, drain)


async def test_a_diverted_reader_passes_buffered_bytes_first_and_pauses_its_source_on_a_full_sink():
    reader, source, slow = TapReader(), FakeTransport(), SlowSink()
    reader.feed_data(b"before ")
    ended = reader.divert(source, slow.sink())  # type: ignore[arg-type]
    reader.feed_data(b"after")
    assert slow.got == [b"before ", b"after"] and source.reading
    reader.feed_data(b"x" * (HIGH_WATER + 1))
    assert not source.reading and source.pauses == 1  # the sink is slow: stop reading
    reader.feed_data(b"y")  # already in flight when paused: still passed, no second pause
    assert slow.got[-1] == b"y" and source.pauses == 1
    slow.drained.set()
    for _ in range(3):
        await asyncio.sleep(0)
    assert source.reading  # drained: reading again
    assert not ended.done()
    reader.feed_eof()
    assert ended.done()


def test_websocket_heads_use_rfc6455s_three_length_forms():
    assert websocket_header(5) == b"\x82\x05"
    assert websocket_header(300) == b"\x82\x7e\x01\x2c"
    assert websocket_header(1 << 20) == b"\x82\x7f" + (1 << 20).to_bytes(8, "big")


def test_a_websocket_sink_splits_large_chunks_into_messages():
    written: list[bytes] = []

    class Transport:
        def is_closing(self) -> bool:
            return False

        def writelines(self, parts: tuple[bytes, memoryview]) -> None:
            written.append(b"".join(bytes(p) for p in parts))

        def get_write_buffer_size(self) -> int:
            return 0

    async def drain() -> None:
        return None

    sink = websocket_sink(Transport(), drain)  # type: ignore[arg-type]
    sink.write(b"a" * (256 * 1024 + 3))
    assert [w[:2] for w in written] == [b"\x82\x7f", b"\x82\x03"]
    assert written[0][10:] == b"a" * (256 * 1024) and written[1][2:] == b"aaa"


async def test_a_large_transfer_through_the_proxy_arrives_whole_to_a_slow_reader():
    blob = os.urandom(8 << 20)

    async def backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        for i in range(0, len(blob), 32768):
            writer.write(blob[i : i + 32768])
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(backend, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def handler(request: web.Request) -> web.StreamResponse:
        return await proxy_upgrade(request, f"http://127.0.0.1:{port}/x")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            site._server.sockets[0].getsockname()[1],  # type: ignore[union-attr]
        )
        writer.write(b"POST /x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")
        digest, got = hashlib.sha256(), 0
        while got < len(blob):
            data = await asyncio.wait_for(reader.read(65536), 10)
            assert data, f"closed after {got} bytes"
            digest.update(data)
            got += len(data)
            if got < 4 << 20:
                await asyncio.sleep(0.001)  # slower than the backend: the proxy must hold back, not drop
        assert digest.digest() == hashlib.sha256(blob).digest()
        writer.close()
    finally:
        await runner.cleanup()
        server.close()
