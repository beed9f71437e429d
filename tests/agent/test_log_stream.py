"""The containerLogs stream over real HTTP (aiohttp server and client on 127.0.0.1) from hand-written
CRI log files: timestamps with UTC offsets against sinceTime/sinceSeconds, the last partial record,
tail and limit counting as upstream's ReadLogs, follow, and a failure after the 200 ending the chunked
stream cleanly instead of truncating it. The whole path through containerd and kubectl is in
e2e/test_logs.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from agent.server.logs import LogOptions, LogOptionsError, stream_log

# The same three seconds written in three offsets, as containerd writes its node's local time.
LOG = (
    b"2016-12-01T10:00:00.100000000+02:00 stdout F one\n"  # 08:00:00.1Z
    b"2016-12-01T08:00:01.000000001Z stderr F two\n"
    b"2016-12-01T03:00:02.5-05:00 stdout P thr\n"  # 08:00:02.5Z
    b"2016-12-01T08:00:02.6Z stdout F ee\n"
    b"2016-12-01T08:00:03Z stdout P DONE\n"
)

Running = Callable[[], Awaitable[bool]]


async def not_running() -> bool:
    return False


@dataclass
class Served:
    url: str
    path: Path
    running: Running = not_running

    async def get(self, **params: str) -> str:
        async with aiohttp.ClientSession() as http, http.get(self.url, params=params) as resp:
            body = await resp.read()  # a truncated chunked body raises ClientPayloadError here
            assert resp.status == 200, body
            return body.decode()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    path = tmp_path / "0.log"
    path.write_bytes(LOG)
    state: dict[str, Served] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            opts = LogOptions.from_query(request.query)
        except LogOptionsError as err:
            return web.Response(status=err.code, text=str(err))
        resp = web.StreamResponse()
        await resp.prepare(request)
        await stream_log(resp, str(path), opts, state["served"].running)
        return resp

    app = web.Application()
    app.router.add_get("/log", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state["served"] = Served(f"http://127.0.0.1:{port}/log", path)
    yield state["served"]
    await runner.cleanup()


async def test_records_as_written_with_the_last_partial_line(served: Served):
    assert await served.get() == "one\ntwo\nthree\nDONE"
    assert await served.get(follow="true") == "one\ntwo\nthree\nDONE"  # exited: read to the end, then stop


async def test_since_time_compares_instants_across_offsets(served: Served):
    assert await served.get(sinceTime="2016-12-01T08:00:01Z") == "two\nthree\nDONE"
    assert await served.get(sinceTime="2016-12-01T09:00:02+01:00") == "three\nDONE"  # 08:00:02Z
    assert await served.get(sinceTime="2016-12-01T08:00:04Z") == ""
    assert await served.get(sinceSeconds="3600") == ""  # written in the past, before the last hour
    assert await served.get(sinceTime="2016-12-01T08:00:01Z", timestamps="true") == (
        "2016-12-01T08:00:01.000000001Z two\n"
        "2016-12-01T03:00:02.500000000-05:00 thr"
        "2016-12-01T08:00:02.600000000Z ee\n"
        "2016-12-01T08:00:03.000000000Z DONE"
    )


async def test_tail_counts_records_and_limit_counts_bytes(served: Served):
    assert await served.get(tailLines="2") == "ee\nDONE"  # records, not joined lines, as upstream
    assert await served.get(tailLines="0") == ""
    assert await served.get(tailLines="3", sinceTime="2016-12-01T08:00:02.55Z") == "ee\nDONE"  # tail first
    assert await served.get(limitBytes="6") == "one\ntw"


async def test_follow_streams_what_is_appended_until_the_container_stops(served: Served):
    path = served.path
    checks = 0

    async def running() -> bool:
        nonlocal checks
        checks += 1
        if checks == 1:
            with path.open("ab") as f:
                f.write(
                    b"2016-12-01T08:00:04Z stdout F  more\n2016-12-01T08:00:05Z stdout F"
                )  # 2nd incomplete
            return True
        if checks == 2:
            with path.open("ab") as f:
                f.write(b" last\n")
        return False

    served.running = running
    assert await served.get(follow="true", tailLines="1") == "DONE more\nlast\n"


async def test_a_failure_after_the_status_line_ends_the_stream_cleanly(served: Served):
    async def broken() -> bool:
        raise RuntimeError("runtime went away mid-stream")

    served.running = broken
    assert await served.get(follow="true") == "one\ntwo\nthree\nDONE"


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ({"tailLines": "-1"}, 422, "tailLines: Invalid value: -1: must be greater than or equal to 0"),
        ({"limitBytes": "0"}, 422, "limitBytes: Invalid value: 0: must be greater than 0"),
        ({"sinceSeconds": "0"}, 422, "sinceSeconds: Invalid value: 0: must be greater than 0"),
        (
            {"sinceSeconds": "5", "sinceTime": "2016-12-01T08:00:00Z"},
            422,
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
        ({"tailLines": "ten"}, 400, "tailLines must be an integer: 'ten'"),
        ({"sinceTime": "yesterday"}, 400, "sinceTime must be an RFC 3339 time: 'yesterday'"),
    ],
)
def test_bad_options_name_the_parameter(query: dict[str, str], code: int, message: str):
    with pytest.raises(LogOptionsError) as err:
        LogOptions.from_query(query)
    assert (err.value.code, str(err.value)) == (code, message)


def test_since_seconds_counts_back_from_now():
    now = datetime(2026, 12, 1, 8, 0, 10, tzinfo=UTC)
    opts = LogOptions.from_query({"sinceSeconds": "10", "follow": "true"}, now)
    assert opts.since is not None and opts.since.format() == "2026-12-01T08:00:00.000000000Z" and opts.follow
