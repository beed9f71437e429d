"""containerLogs: one container's CRI log file streamed to `kubectl logs`, as upstream's ReadLogs does.

Each record of the file is written as it stands (its content, and a newline unless it is partial), so
a line the container never finished is served too, and a follower sees long lines as they come.
tailLines counts records from the end, sinceSeconds/sinceTime drop records older than the bound (to the
nanosecond, whatever UTC offset the runtime wrote), limitBytes cuts the output, timestamps prefixes
each record with its time in RFC3339NanoFixed. With follow the stream goes on until the container is
no longer running and the file has been read to its end.

Once the 200 has been sent nothing may fail the request: an error ends the stream cleanly (what was
written stays written) and is logged, as upstream's handler appends its error to a started stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiohttp import web

from agent.cri.logs import LogFile, LogFormatError, LogRecord, Timestamp

log = logging.getLogger("agent.server")

FOLLOW_POLL = 0.2  # seconds between looks at a followed file that had nothing new


class LogOptionsError(ValueError):
    """A query parameter that is not what PodLogOptions allows: 400 when it cannot be read, 422 when it
    breaks a rule (upstream's ValidatePodLogOptions texts); the message names the parameter."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class LogOptions:
    """upstream's PodLogOptions as the kubelet reads them from the query (NewLogOptions)."""

    tail: int | None = None  # records from the end; None: all
    limit_bytes: int | None = None
    since: Timestamp | None = None  # records before this are skipped
    follow: bool = False
    timestamps: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str], now: datetime | None = None) -> LogOptions:
        def flag(key: str) -> bool:
            return query.get(key) in ("true", "1")

        def integer(key: str, least: int) -> int | None:
            if key not in query:
                return None
            try:
                number = int(query[key])
            except ValueError:
                raise LogOptionsError(400, f"{key} must be an integer: {query[key]!r}") from None
            if number < least:
                rule = "greater than or equal to 0" if least == 0 else "greater than 0"
                raise LogOptionsError(422, f"{key}: Invalid value: {number}: must be {rule}")
            return number

        tail, limit, seconds = integer("tailLines", 0), integer("limitBytes", 1), integer("sinceSeconds", 1)
        if seconds is not None and query.get("sinceTime"):
            raise LogOptionsError(422, "at most one of `sinceTime` or `sinceSeconds` may be specified")
        since = None
        if seconds is not None:
            since = Timestamp.from_datetime((now or datetime.now(UTC)) - timedelta(seconds=seconds))
        elif query.get("sinceTime"):
            try:
                since = Timestamp.parse(query["sinceTime"])
            except LogFormatError:
                raise LogOptionsError(
                    400, f"sinceTime must be an RFC 3339 time: {query['sinceTime']!r}"
                ) from None
        return cls(tail, limit, since, flag("follow"), flag("timestamps"))


class _Writer:
    """Writes records to the response, counting limitBytes and tailLines; False once either is spent."""

    def __init__(self, resp: web.StreamResponse, opts: LogOptions) -> None:
        self.resp = resp
        self.opts = opts
        self.bytes_left = opts.limit_bytes
        # upstream's "limited mode": without follow, tailLines also caps how many records are written
        self.records_left = opts.tail if opts.tail is not None and not opts.follow else None

    async def write(self, records: list[LogRecord]) -> bool:
        since = self.opts.since
        for record in records:
            if self.records_left is not None:
                if self.records_left <= 0:
                    return False
                self.records_left -= 1
            if since is not None and record.time.ns < since.ns:
                continue
            data = record.render(self.opts.timestamps)
            if self.bytes_left is not None:
                data = data[: self.bytes_left]
                self.bytes_left -= len(data)
            await self.resp.write(data)
            if self.bytes_left is not None and self.bytes_left <= 0:
                return False
        return self.records_left is None or self.records_left > 0


async def stream_log(
    resp: web.StreamResponse, path: str, opts: LogOptions, still_running: Callable[[], Awaitable[bool]]
) -> None:
    """Write the log to a prepared response; returns when done (never raises but CancelledError)."""
    logfile = LogFile(path)
    writer = _Writer(resp, opts)
    try:
        if opts.tail is not None:
            if opts.tail == 0 and not opts.follow:
                return
            await asyncio.to_thread(logfile.seek_tail, opts.tail)
        while True:
            records = await asyncio.to_thread(logfile.read)
            if records:
                if not await writer.write(records):
                    return
                continue
            if not opts.follow:
                return
            if not await still_running():
                # Gone: what it wrote before it stopped is read to the end, then the stream ends.
                while records := await asyncio.to_thread(logfile.read):
                    if not await writer.write(records):
                        return
                return
            await asyncio.sleep(FOLLOW_POLL)
    except (ConnectionResetError, ConnectionAbortedError):
        return  # the client went away
    except Exception:
        log.exception("container log stream failed path=%s", path)
    finally:
        await _end(resp)


async def _end(resp: web.StreamResponse) -> None:
    try:
        await resp.write_eof()
    except (ConnectionResetError, ConnectionAbortedError, RuntimeError):
        pass  # the client went away, or the response was already ended
