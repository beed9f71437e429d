"""kubeclient/httpstream: the upgrade-aware proxy (a WebSocket and a raw SPDY-style upgrade spliced
through aiohttp, a refusal passed back as it came, the backend's connection closed when the client
goes) and the SPDY/3.1 framing (header blocks, one zlib stream across frames, DATA and control frames).
Real sockets on 127.0.0.1; the backends are the smallest servers that speak each handshake."""

from __future__ import annotations

import asyncio
import struct
import zlib

import aiohttp
from aiohttp import web

from kubeclient.httpstream import protocols as P
from kubeclient.httpstream.spdy import (
    FLAG_FIN,
    SYN_STREAM,
    SpdyClient,
    control_frame,
    data_frame,
    header_block,
    parse_header_block,
    read_frame,
)
from kubeclient.httpstream.upgrade import proxy_upgrade


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def _proxy_to(backend_port: int) -> tuple[web.AppRunner, int]:
    async def handler(request: web.Request) -> web.StreamResponse:
        return await proxy_upgrade(request, f"http://127.0.0.1:{backend_port}{request.path_qs}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return await _serve(app)


async def test_websocket_is_spliced_with_its_subprotocol():
    async def echo(request: web.Request) -> web.StreamResponse:
        if request.path == "/refuse":
            return web.json_response({"kind": "Status", "message": "no"}, status=403)
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_bytes(b"\x01" + msg.data[1:] + request.query.get("tag", "").encode())
        return ws

    app = web.Application()
    app.router.add_get("/{tail:.*}", echo)
    backend, port = await _serve(app)
    proxy, proxy_port = await _proxy_to(port)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(
                f"http://127.0.0.1:{proxy_port}/exec?tag=%21", protocols=("bogus", "v4.channel.k8s.io")
            ) as ws:
                assert ws.protocol == "v4.channel.k8s.io"
                for i in range(20):
                    await ws.send_bytes(b"\x00" + str(i).encode() * 5000)
                    assert (await ws.receive_bytes()) == b"\x01" + str(i).encode() * 5000 + b"!"
            headers = {
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            }
            async with http.get(f"http://127.0.0.1:{proxy_port}/refuse", headers=headers) as resp:
                assert resp.status == 403 and (await resp.json())["message"] == "no"
    finally:
        await proxy.cleanup()
        await backend.cleanup()


async def test_a_non_websocket_upgrade_passes_byte_for_byte_and_the_backend_closes_with_the_client():
    closed = asyncio.Event()

    async def backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"Upgrade: SPDY/3.1" in head and b"Authorization" not in head
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\nhello"
        )
        while data := await reader.read(1024):
            writer.write(data.upper())
        closed.set()
        writer.close()

    server = await asyncio.start_server(backend, "127.0.0.1", 0)
    proxy, proxy_port = await _proxy_to(server.sockets[0].getsockname()[1])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.write(
            b"POST /exec/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            b"Authorization: Bearer secret\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n"
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 ") and b"X-Stream-Protocol-Version: v4.channel.k8s.io" in head
        assert await reader.readexactly(5) == b"hello"
        # Bytes right behind the handshake, in the same packet: none may reach aiohttp's HTTP parser.
        writer.write(b"\x80\x03\x00\x01 spdy bytes")
        await writer.drain()
        assert await reader.readexactly(15) == b"\x80\x03\x00\x01 SPDY BYTES"
        writer.close()
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await proxy.cleanup()
        server.close()


def test_protocol_helpers_read_headers_as_upstream():
    from multidict import CIMultiDict

    h = CIMultiDict(
        [
            ("Connection", "keep-alive, Upgrade"),
            ("Upgrade", "websocket"),
            ("Sec-WebSocket-Protocol", "v5.channel.k8s.io, v4.channel.k8s.io"),
            ("Sec-WebSocket-Protocol", "SPDY/3.1+portforward.k8s.io"),
        ]
    )
    assert P.is_upgrade_request(h) and P.is_websocket_request(h)
    assert P.websocket_protocols(h) == [
        "v5.channel.k8s.io",
        "v4.channel.k8s.io",
        "SPDY/3.1+portforward.k8s.io",
    ]
    assert P.tunneled_spdy_protocols(h) == ["portforward.k8s.io"]
    assert not P.is_upgrade_request(CIMultiDict([("Upgrade", "websocket")]))


def test_header_blocks_round_trip_through_one_zlib_stream():
    compressor, inflater = zlib.compressobj(9), zlib.decompressobj()
    for headers in ([("streamType", "error")], [("streamtype", "stdin"), ("x", "a"), ("x", "b")]):
        raw = header_block(headers)
        packed = compressor.compress(raw) + compressor.flush(zlib.Z_SYNC_FLUSH)
        assert inflater.decompress(packed) == raw
    assert parse_header_block(header_block([("A", "1"), ("a", "2"), ("b", "")])) == [
        ("a", "1"),
        ("a", "2"),
        ("b", ""),
    ]


async def test_spdy_client_opens_streams_writes_half_closes_and_answers_pings():
    """A minimal SPDY server (SYN_REPLY to each stream, echo of DATA upper-cased, a PING) in front of
    SpdyClient."""
    seen: list[tuple[int, bytes, bool]] = []

    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(control_frame(6, 0, struct.pack(">I", 2)))  # the server's ping (even id)
        while (frame := await read_frame(reader)) is not None:
            if frame.control and frame.kind == SYN_STREAM:
                writer.write(control_frame(2, 0, struct.pack(">I", frame.stream_id) + b"\x78\x9c"))
            elif frame.control and frame.kind == 6:
                seen.append((0, frame.payload, False))
            elif not frame.control:
                seen.append((frame.stream_id, frame.payload, frame.fin))
                writer.write(data_frame(frame.stream_id, FLAG_FIN if frame.fin else 0, frame.payload.upper()))
        writer.close()

    srv = await asyncio.start_server(server, "127.0.0.1", 0)
    reader, writer = await asyncio.open_connection(*srv.sockets[0].getsockname()[:2])
    spdy = SpdyClient(reader, writer)
    got: list[tuple[int, bytes, bool]] = []

    async def on_data(sid: int, data: bytes, fin: bool) -> None:
        got.append((sid, data, fin))

    loop = asyncio.ensure_future(spdy.run(on_data))
    try:
        first = await spdy.open_stream([("streamtype", "error")])
        second = await spdy.open_stream([("streamtype", "stdin")])
        assert (first, second) == (1, 3)
        await spdy.write(second, b"x" * 70_000)  # more than one DATA frame
        await spdy.close_stream(second)
        deadline = asyncio.get_running_loop().time() + 5
        while not (got and got[-1][2]) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert b"".join(d for s, d, _ in got if s == second) == b"X" * 70_000 and got[-1] == (
            second,
            b"",
            True,
        )
        assert (0, struct.pack(">I", 2), False) in seen  # the ping came back
    finally:
        await spdy.close()
        await asyncio.wait_for(loop, 5)
        srv.close()
