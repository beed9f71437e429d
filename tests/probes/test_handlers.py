"""The dispatcher: API-shaped probe and lifecycle-handler dicts run against real local servers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from agent.probes.handlers import run_handler, user_agent
from agent.probes.result import Result, Target

UA = "kube-probe/1.32"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[tuple[int, list[dict]]]:
    seen: list[dict] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append({"path": request.path_qs, "headers": dict(request.headers)})
        return web.Response(status=500 if request.path == "/fail" else 200, text=f"at {request.path}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", anything)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield runner.addresses[0][1], seen
    await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_user_agent_from_versions() -> None:
    assert user_agent("v1.32.0") == "kube-probe/1.32"
    assert user_agent("1.32.0-pykubelet") == "kube-probe/1.32"
    assert user_agent("v1.9.11-beta.0") == "kube-probe/1.9"
    assert user_agent("v1.32.0", "lifecycle") == "kube-lifecycle/1.32"


async def test_http_get_on_the_pod_ip_with_a_named_port_and_headers(server) -> None:
    port, seen = server
    seen.clear()
    target = Target("127.0.0.1", "c1", (("metrics", 1), ("http", port)))
    action = {
        "httpGet": {
            "path": "healthz?full=1",
            "port": "http",
            "scheme": "HTTP",
            "httpHeaders": [{"name": "X-Probe", "value": "yes"}],
        },
        "timeoutSeconds": 1,
    }
    outcome = await run_handler(action, target, 1, None, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "at /healthz")
    [request] = seen
    assert request["path"] == "/healthz?full=1"
    assert request["headers"]["X-Probe"] == "yes"
    assert request["headers"]["User-Agent"] == UA


async def test_http_get_host_overrides_the_pod_ip(server) -> None:
    port, _ = server
    action = {"httpGet": {"path": "/fail", "port": port, "host": "127.0.0.1"}}
    outcome = await run_handler(action, Target("192.0.2.1", "c1"), 1, None, UA)
    assert (outcome.result, outcome.output) == (Result.FAILURE, "HTTP probe failed with statuscode: 500")


async def test_http_get_with_a_numeric_string_port(server) -> None:
    port, _ = server
    action = {"httpGet": {"path": "/", "port": str(port)}}
    assert (await run_handler(action, Target("127.0.0.1", "c1"), 1, None, UA)).result is Result.SUCCESS


async def test_tcp_socket_on_the_pod_ip() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        target = Target("127.0.0.1", "c1", (("db", port),))
        outcome = await run_handler({"tcpSocket": {"port": "db"}}, target, 1, None, UA)
    assert outcome.result is Result.SUCCESS


async def test_tcp_socket_refused_and_host_override() -> None:
    port = closed_port()
    action = {"tcpSocket": {"port": port, "host": "127.0.0.1"}}
    outcome = await run_handler(action, Target("192.0.2.1", "c1"), 1, None, UA)
    assert (outcome.result, outcome.output) == (
        Result.FAILURE,
        f"dial tcp 127.0.0.1:{port}: connect: connection refused",
    )


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("nope", 'strconv.Atoi: parsing "nope": invalid syntax'),
        (0, "invalid port number: 0"),
        (None, "invalid port number: 0"),
        (70000, "invalid port number: 70000"),
    ],
)
@pytest.mark.parametrize("kind", ["httpGet", "tcpSocket"])
async def test_a_port_that_does_not_resolve_is_unknown(kind: str, port, message: str) -> None:
    action = {kind: {"port": port}}
    outcome = await run_handler(action, Target("127.0.0.1", "c1", (("http", 8080),)), 1, None, UA)
    assert (outcome.result, outcome.output) == (Result.UNKNOWN, message)


async def test_no_handler_is_unknown() -> None:
    outcome = await run_handler({"periodSeconds": 10}, Target("127.0.0.1", "c1"), 1, None, UA)
    assert (outcome.result, outcome.output) == (Result.UNKNOWN, "missing probe handler")


async def test_grpc_is_dispatched_to_the_grpc_checker() -> None:
    pytest.importorskip("agent.probes.grpc")
    outcome = await run_handler({"grpc": {"port": closed_port()}}, Target("127.0.0.1", "c1"), 1, None, UA)
    assert not outcome.ok


async def test_grpc_with_a_bad_port_is_unknown_before_any_import() -> None:
    outcome = await run_handler({"grpc": {"port": 0}}, Target("127.0.0.1", "c1"), 1, None, UA)
    assert (outcome.result, outcome.output) == (Result.UNKNOWN, "invalid port number: 0")
