"""A missing, dead or silent runtime socket fails fast with a clear message, never a hang."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from agent.cri import CRIClient, IncompatibleRuntimeError, RuntimeUnreachableError, Timeouts

# Far above the 2 s connect deadline used here; only there to turn a hang into a failure.
HANG_GUARD = 20


async def _connect(endpoint: str) -> None:
    await asyncio.wait_for(CRIClient.connect(endpoint, timeouts=Timeouts(connect=2)), HANG_GUARD)


async def test_missing_socket(tmp_path: Path) -> None:
    endpoint = f"unix://{tmp_path}/nothing.sock"
    with pytest.raises(RuntimeUnreachableError) as info:
        await _connect(endpoint)
    assert str(info.value).startswith(f"container runtime not reachable at {endpoint}: ")
    assert "no socket" in info.value.cause


async def test_dead_socket(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the file stays, nobody listens: connection refused
    with pytest.raises(RuntimeUnreachableError) as info:
        await _connect(f"unix://{path}")
    assert info.value.endpoint == f"unix://{path}"


async def test_silent_socket(tmp_path: Path) -> None:
    """Accepts connections but never speaks HTTP/2: the connect deadline must end it."""
    path = tmp_path / "silent.sock"
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_unix_server(hold, path=str(path))
    try:
        with pytest.raises(RuntimeUnreachableError) as info:
            await _connect(f"unix://{path}")
        assert "DEADLINE_EXCEEDED" in info.value.cause or "UNAVAILABLE" in info.value.cause
    finally:
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()


@pytest.mark.integration
async def test_connect_reports_runtime_version(cri: CRIClient) -> None:
    assert cri.version is not None
    assert cri.version.runtime_name == "containerd"
    assert cri.version.runtime_api_version == "v1"


async def test_incompatible_runtime_is_named(tmp_path: Path) -> None:
    """A gRPC server that does not serve runtime.v1 is reported as incompatible, not unreachable."""
    import grpc

    path = tmp_path / "other.sock"
    server = grpc.aio.server()
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    try:
        with pytest.raises(IncompatibleRuntimeError):
            await _connect(f"unix://{path}")
    finally:
        await server.stop(0)
