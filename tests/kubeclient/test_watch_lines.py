"""A watch stream's chunks cut into its newline-delimited events, however the chunks fall: several
events in one chunk (a burst), an event split over chunks, events longer than aiohttp's 64 KiB line
limit, blank keep-alive lines, and a last event without its newline."""

from __future__ import annotations

from collections.abc import AsyncIterator

from kubeclient.client import _lines


class Chunks:
    """The part of aiohttp's StreamReader that `_lines` reads."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def lines_of(*chunks: bytes) -> list[bytes]:
    return [line async for line in _lines(Chunks(*chunks))]  # type: ignore[arg-type]


async def test_a_burst_in_one_chunk_gives_each_event_in_order() -> None:
    events = [b'{"n":%d}' % i for i in range(500)]
    assert await lines_of(b"\n".join(events) + b"\n") == events


async def test_events_split_over_chunks_are_put_back_together() -> None:
    big = b'{"big":"' + b"x" * 100_000 + b'"}'
    stream = b'{"a":1}\n' + big + b'\n\n{"b":2}\n{"c":3}'
    chunks = [stream[i : i + 4096] for i in range(0, len(stream), 4096)]
    assert await lines_of(*chunks) == [b'{"a":1}', big, b'{"b":2}', b'{"c":3}']


async def test_blank_lines_are_skipped_and_nothing_comes_of_an_empty_stream() -> None:
    assert await lines_of(b"\n", b"  \n\n", b'{"a":1}\n', b"\n") == [b'{"a":1}']
    assert await lines_of() == []
