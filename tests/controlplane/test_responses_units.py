"""controlplane/apiserver/responses.py's list answers: a large list body goes out in slices, the event
loop running other work between them, with the very bytes and headers one write of it sends (an aiohttp
server on this loop, a real client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter
from aiohttp.test_utils import TestClient, TestServer

from controlplane.apiserver import responses
from controlplane.storage.encoding import encode


def items(count: int) -> tuple[bytes, list[bytes]]:
    head = encode({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}})
    raws = [
        encode(
            {
                "metadata": {"name": f"p{i}", "namespace": "ns", "labels": {"app": "é" * (i % 7)}},
                "x": "y" * 300,
            }
        )
        for i in range(count)
    ]
    return head, raws


def one_write(head: bytes, raws: list[bytes]) -> bytes:
    """The body as the list handler wrote it before: joined, then the encoder's newline appended."""
    return b"".join([head[:-1], b',"items":[', b",".join(raws), b"]}"]) + b"\n"


@pytest.mark.parametrize("count", [0, 2, 3000])
async def test_a_list_body_is_sent_in_slices_with_the_bytes_and_headers_of_one_write(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    head, raws = items(count)
    expected = one_write(head, raws)
    ticks = 0
    writes: list[tuple[int, int]] = []  # (size, ticks) of each slice before the last
    original = StreamWriter.write

    async def spy(self: StreamWriter, chunk: Any, *args: Any, **kwargs: Any) -> None:
        if len(chunk) > 1000:  # the body's slices, not the headers
            writes.append((len(chunk), ticks))
        await original(self, chunk, *args, **kwargs)

    monkeypatch.setattr(StreamWriter, "write", spy)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def sliced_list(_: web.Request) -> web.Response:
        return responses.list_json_response(head, raws)

    async def one_body(_: web.Request) -> web.Response:
        return web.Response(body=expected, content_type="application/json")

    app = web.Application()
    app.router.add_get("/sliced", sliced_list)
    app.router.add_get("/plain", one_body)
    task = asyncio.create_task(ticker())
    try:
        async with TestClient(TestServer(app)) as client:
            plain = await client.get("/plain")
            plain_body = await plain.read()
            writes.clear()
            sliced = await client.get("/sliced")
            body = await sliced.read()
    finally:
        task.cancel()
    assert body == plain_body == expected
    for header in ("Content-Length", "Content-Type"):
        assert sliced.headers[header] == plain.headers[header]
    assert "Transfer-Encoding" not in sliced.headers
    if len(expected) <= responses.SLICE:
        assert len(writes) <= 1  # a small body is one write, as before
        return
    # every slice but the last, which goes out with the response's end
    assert len(writes) == -(-len(expected) // responses.SLICE) - 1 >= 2
    assert all(size == responses.SLICE for size, _ in writes)
    marks = [tick for _, tick in writes]
    assert marks == sorted(set(marks)), "the loop ran other work between two slices"
