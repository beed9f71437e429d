"""httpGet handler against real servers on loopback: an aiohttp app for status codes, headers,
redirects and slow answers; raw asyncio servers where the wire itself matters (chunked bodies, a
connection that is never closed, a server that hangs up)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from agent.probes.http import canonical_header, http_probe, probe_url
from agent.probes.result import Result
from agent.server.tls import ensure_self_signed, server_context

UA = "kube-probe/1.32"


@dataclass
class Site:
    port: int
    other_port: int
    seen: list[dict] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def _app(site: Site) -> web.Application:
    async def record(request: web.Request) -> None:
        site.seen.append(
            {"path": request.path_qs, "host": request.host, "headers": list(request.headers.items())}
        )

    async def ok(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(text="ok")

    async def status(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(status=int(request.match_info["code"]), text="status body")

    async def redirect(request: web.Request) -> web.Response:
        await record(request)
        hops = int(request.match_info["hops"])
        location = "/ok" if hops == 0 else f"/redirect/{hops - 1}"
        return web.Response(status=302, headers={"Location": location}, text="moved")

    async def elsewhere(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(
            status=302, headers={"Location": f"http://127.0.0.2:{site.other_port}/ok"}, text="go away"
        )

    async def forever(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(status=301, headers={"Location": "/forever"})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("s", "2")))
        return web.Response(text="late")

    async def slow_hop(request: web.Request) -> web.Response:
        await asyncio.sleep(0.2)
        return web.Response(status=307, headers={"Location": "/slow?s=0.2"})

    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"a" * 10240 + b"b" * 10000)

    app = web.Application()
    app.router.add_get("/ok", ok)
    app.router.add_get("/status/{code}", status)
    app.router.add_get("/redirect/{hops}", redirect)
    app.router.add_get("/elsewhere", elsewhere)
    app.router.add_get("/forever", forever)
    app.router.add_get("/slow", slow)
    app.router.add_get("/slow-hop", slow_hop)
    app.router.add_get("/big", big)
    return app


@pytest.fixture(scope="module")
async def site() -> AsyncIterator[Site]:
    """The app on 127.0.0.1, and a second copy on 127.0.0.2 that a cross-host redirect points at."""
    other = Site(0, 0)
    other_runner = web.AppRunner(_app(other))
    await other_runner.setup()
    await web.TCPSite(other_runner, "127.0.0.2", 0).start()
    main = Site(0, other_runner.addresses[0][1])
    main.other_seen = other.seen  # type: ignore[attr-defined]
    runner = web.AppRunner(_app(main))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    main.port = runner.addresses[0][1]
    yield main
    await runner.cleanup()
    await other_runner.cleanup()


@pytest.fixture
def fresh(site: Site) -> Site:
    site.seen.clear()
    site.other_seen.clear()  # type: ignore[attr-defined]
    return site


async def raw_server(answer: bytes, close: bool = True) -> tuple[asyncio.Server, int]:
    """A server that reads the request head, writes `answer` and closes (or keeps) the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if not close:
            # held open until the prober hangs up (it must: keep-alives are off), at most 10 s; Python
            # 3.12+ waits for this handler when the test's `async with server` ends
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(), 10)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- URL --------------------------------------------------------------------------------------------


def test_probe_url_as_upstream_formats_it() -> None:
    assert probe_url("http", "10.0.0.5", 8080, "/healthz") == "http://10.0.0.5:8080/healthz"
    assert probe_url("http", "10.0.0.5", 8080, "healthz") == "http://10.0.0.5:8080/healthz"
    assert probe_url("HTTPS", "10.0.0.5", 443, "/a?b=c") == "https://10.0.0.5:443/a?b=c"
    assert probe_url("http", "fd00::5", 80, "/") == "http://[fd00::5]:80/"
    assert probe_url("http", "10.0.0.5", 80, "") == "http://10.0.0.5:80"


def test_header_names_are_canonical_as_in_go() -> None:
    assert canonical_header("x-custom-header") == "X-Custom-Header"
    assert canonical_header("user-agent") == "User-Agent"
    assert canonical_header("ACCEPT") == "Accept"


# -- statuses ---------------------------------------------------------------------------------------


async def test_200_is_success_with_the_body(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/ok"), [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "ok")


@pytest.mark.parametrize("code", [200, 204, 299])
async def test_2xx_is_success(fresh: Site, code: int) -> None:
    assert (await http_probe(fresh.url(f"/status/{code}"), [], 1, UA)).result is Result.SUCCESS


@pytest.mark.parametrize("code", [400, 404, 500, 503])
async def test_other_codes_fail_without_the_body(fresh: Site, code: int) -> None:
    outcome = await http_probe(fresh.url(f"/status/{code}"), [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.FAILURE, f"HTTP probe failed with statuscode: {code}")


async def test_a_3xx_that_is_not_a_redirect_is_a_warning(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/status/300"), [], 1, UA)
    assert (outcome.result, outcome.output) == (
        Result.WARNING,
        "Probe terminated redirects, Response body: status body",
    )
    assert outcome.ok


async def test_body_is_cut_at_10_kib(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/big"), [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "a" * 10240)


# -- request headers --------------------------------------------------------------------------------


async def test_default_headers_and_no_keep_alive(fresh: Site) -> None:
    await http_probe(fresh.url("/ok?x=1"), [], 1, UA)
    [request] = fresh.seen
    headers = dict(request["headers"])
    assert request["path"] == "/ok?x=1"
    assert headers["User-Agent"] == UA
    assert headers["Accept"] == "*/*"
    assert headers["Connection"] == "close"
    assert headers["Host"] == f"127.0.0.1:{fresh.port}"
    assert "Accept-Encoding" not in headers


async def test_probe_headers_are_sent_and_replace_the_defaults(fresh: Site) -> None:
    custom = [
        ("x-custom", "one"),
        ("X-Custom", "two"),
        ("user-agent", "my-checker/2"),
        ("Accept", "application/json"),
        ("Host", "svc.example"),
    ]
    await http_probe(fresh.url("/ok"), custom, 1, UA)
    [request] = fresh.seen
    sent = request["headers"]
    assert [v for k, v in sent if k == "X-Custom"] == ["one", "two"]
    assert [v for k, v in sent if k == "User-Agent"] == ["my-checker/2"]
    assert [v for k, v in sent if k == "Accept"] == ["application/json"]
    assert [v for k, v in sent if k == "Host"] == ["svc.example"]


async def test_an_empty_accept_removes_it_and_an_empty_user_agent_sends_none(fresh: Site) -> None:
    await http_probe(fresh.url("/ok"), [("Accept", ""), ("User-Agent", "")], 1, UA)
    names = [k for k, _ in fresh.seen[0]["headers"]]
    assert "Accept" not in names
    assert "User-Agent" not in names


async def test_header_values_cannot_split_the_request(fresh: Site) -> None:
    await http_probe(fresh.url("/ok"), [("X-Evil", "a\r\nX-Injected: yes")], 1, UA)
    headers = dict(fresh.seen[0]["headers"])
    assert "X-Injected" not in headers
    assert headers["X-Evil"] == "a  X-Injected: yes"


async def test_an_invalid_header_name_fails_the_probe(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/ok"), [("bad name", "x")], 1, UA)
    assert outcome.result is Result.FAILURE
    assert outcome.output == f'Get "{fresh.url("/ok")}": net/http: invalid header field name "bad name"'
    assert fresh.seen == []


# -- redirects --------------------------------------------------------------------------------------


async def test_redirects_to_the_same_host_are_followed(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/redirect/3"), [("X-Custom", "kept")], 1, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "ok")
    assert [r["path"] for r in fresh.seen] == [
        "/redirect/3",
        "/redirect/2",
        "/redirect/1",
        "/redirect/0",
        "/ok",
    ]
    last = dict(fresh.seen[-1]["headers"])
    assert last["X-Custom"] == "kept"
    assert last["User-Agent"] == UA
    assert last["Referer"] == fresh.url("/redirect/0")


async def test_a_custom_host_survives_a_relative_redirect(fresh: Site) -> None:
    await http_probe(fresh.url("/redirect/0"), [("Host", "svc.example")], 1, UA)
    assert [r["host"] for r in fresh.seen] == ["svc.example", "svc.example"]


async def test_a_redirect_to_another_host_is_not_followed_and_warns(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/elsewhere"), [], 1, UA)
    assert (outcome.result, outcome.output) == (
        Result.WARNING,
        "Probe terminated redirects, Response body: go away",
    )
    assert [r["path"] for r in fresh.seen] == ["/elsewhere"]
    assert fresh.other_seen == []  # type: ignore[attr-defined]


async def test_more_than_10_redirects_fail(fresh: Site) -> None:
    outcome = await http_probe(fresh.url("/forever"), [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.FAILURE, 'Get "/forever": stopped after 10 redirects')
    assert len(fresh.seen) == 11


# -- transport errors and timeouts ------------------------------------------------------------------


async def test_refused_connection_fails_with_gos_error() -> None:
    port = closed_port()
    url = f"http://127.0.0.1:{port}/healthz"
    outcome = await http_probe(url, [], 1, UA)
    assert outcome.result is Result.FAILURE
    assert outcome.output == f'Get "{url}": dial tcp 127.0.0.1:{port}: connect: connection refused'


async def test_a_slow_answer_times_out_awaiting_headers(fresh: Site) -> None:
    url = fresh.url("/slow?s=2")
    started = time.monotonic()
    outcome = await http_probe(url, [], 0.3, UA)
    assert time.monotonic() - started < 0.8
    assert outcome.result is Result.FAILURE
    assert outcome.output == (
        f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
    )


async def test_timeout_covers_the_whole_redirect_chain(fresh: Site) -> None:
    """Each hop answers in 0.2 s, inside the 0.3 s timeout; the two together do not."""
    outcome = await http_probe(fresh.url("/slow-hop"), [], 0.3, UA)
    assert outcome.result is Result.FAILURE
    assert outcome.output == (
        f'Get "{fresh.url("/slow?s=0.2")}": context deadline exceeded '
        "(Client.Timeout exceeded while awaiting headers)"
    )


async def test_a_body_that_stalls_is_an_errored_probe() -> None:
    server, port = await raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial", close=False)
    async with server:
        outcome = await http_probe(f"http://127.0.0.1:{port}/", [], 0.3, UA)
    assert outcome.result is Result.UNKNOWN
    assert outcome.output == (
        "context deadline exceeded (Client.Timeout or context cancellation while reading body)"
    )


async def test_a_server_that_hangs_up_without_answering_is_eof() -> None:
    server, port = await raw_server(b"")
    async with server:
        outcome = await http_probe(f"http://127.0.0.1:{port}/x", [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.FAILURE, f'Get "http://127.0.0.1:{port}/x": EOF')


async def test_a_malformed_answer_fails() -> None:
    server, port = await raw_server(b"SSH-2.0-OpenSSH\r\n\r\n")
    async with server:
        outcome = await http_probe(f"http://127.0.0.1:{port}/", [], 1, UA)
    assert outcome.result is Result.FAILURE
    assert "malformed HTTP response" in outcome.output


# -- framing ----------------------------------------------------------------------------------------


async def test_chunked_body_on_a_connection_left_open() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
    )
    server, port = await raw_server(answer, close=False)
    async with server:
        started = time.monotonic()
        outcome = await http_probe(f"http://127.0.0.1:{port}/", [], 2, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "hello world")
    assert time.monotonic() - started < 1


async def test_content_length_body_on_a_connection_left_open() -> None:
    server, port = await raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", close=False)
    async with server:
        outcome = await http_probe(f"http://127.0.0.1:{port}/", [], 2, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "hello")


async def test_body_read_to_eof_and_interim_responses_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil the end"
    server, port = await raw_server(answer)
    async with server:
        outcome = await http_probe(f"http://127.0.0.1:{port}/", [], 1, UA)
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "until the end")


# -- HTTPS ------------------------------------------------------------------------------------------


async def test_https_skips_certificate_verification(tmp_path: Path) -> None:
    app = web.Application()

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=f"tls {request.secure}")

    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    # Self-signed: no client that checks certificates would accept it.
    cert, key = ensure_self_signed(tmp_path, "not-the-probed-host", [])
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(cert, key, None)).start()
    port = runner.addresses[0][1]
    try:
        outcome = await http_probe(probe_url("https", "127.0.0.1", port, "/"), [], 1, UA)
    finally:
        await runner.cleanup()
    assert (outcome.result, outcome.output) == (Result.SUCCESS, "tls True")


# -- many at once -----------------------------------------------------------------------------------


async def test_110_concurrent_probes_all_succeed(fresh: Site) -> None:
    started = time.monotonic()
    outcomes = await asyncio.gather(*(http_probe(fresh.url("/ok"), [], 1, UA) for _ in range(110)))
    assert {o.result for o in outcomes} == {Result.SUCCESS}
    assert time.monotonic() - started < 1
