"""tcpSocket handler against real sockets on loopback."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from agent.probes.result import Result
from agent.probes.tcp import go_quote, join_host_port, tcp_probe


async def test_an_open_port_is_success_and_the_connection_is_closed_at_once() -> None:
    accepted: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(await reader.read())  # EOF as soon as the prober closes
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        outcome = await tcp_probe("127.0.0.1", port, 1)
        for _ in range(50):
            if accepted:
                break
            await asyncio.sleep(0.01)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "")
    assert accepted == [b""]


async def test_a_host_name_is_resolved() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert (await tcp_probe("localhost", port, 1)).result is Result.SUCCESS


async def test_a_closed_port_is_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    outcome = await tcp_probe("127.0.0.1", port, 1)
    assert (outcome.result, outcome.output) == (
        Result.FAILURE,
        f"dial tcp 127.0.0.1:{port}: connect: connection refused",
    )


async def test_a_connect_that_hangs_times_out() -> None:
    """A listener whose accept queue is full drops new SYNs, so the connect never completes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        await asyncio.sleep(0.1)
        started = time.monotonic()
        outcome = await tcp_probe("127.0.0.1", port, 0.5)
        elapsed = time.monotonic() - started
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
    assert (outcome.result, outcome.output) == (Result.FAILURE, f"dial tcp 127.0.0.1:{port}: i/o timeout")
    assert 0.4 < elapsed < 1.0


async def test_an_unknown_name_fails_the_lookup() -> None:
    outcome = await tcp_probe("no-such-host.invalid", 80, 1)
    assert (outcome.result, outcome.output) == (
        Result.FAILURE,
        "dial tcp: lookup no-such-host.invalid: no such host",
    )


async def test_ipv6_loopback() -> None:
    try:
        server = await asyncio.start_server(lambda r, w: w.close(), "::1", 0)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = server.sockets[0].getsockname()[1]
    async with server:
        assert (await tcp_probe("::1", port, 1)).result is Result.SUCCESS
    outcome = await tcp_probe("::1", port, 1)
    assert outcome.output == f"dial tcp [::1]:{port}: connect: connection refused"


def test_go_formatting_helpers() -> None:
    assert join_host_port("10.0.0.5", 80) == "10.0.0.5:80"
    assert join_host_port("fd00::1", 80) == "[fd00::1]:80"
    assert go_quote('sh -c "exit 1"') == '"sh -c \\"exit 1\\""'
    assert go_quote("a\tb\nc\x01é") == '"a\\tb\\nc\\x01é"'
