"""Reading container logs in the CRI log format.

containerd writes each line of a container's stdout/stderr as
`<RFC 3339 timestamp> <stream> <tags> <content>`, e.g. `2016-10-06T00:17:09.669794202Z stdout F text`:
the time with up to nine fraction digits and `Z` or a `+hh:mm` offset (containerd writes the node's
local time), tag `F` ends a line and `P` marks a partial one, which continues in the next record or,
when the container exited mid-line, is the last thing it wrote.

Like upstream's pkg/kubelet/kuberuntime/logs, everything here works on records, one per line of the
file: `kubectl logs` prints each record's content followed by a newline unless the record is partial,
`--tail` counts records, `--since` compares each record's own time. `read_entries` joins partial records
back into whole lines for callers that want what the container wrote line by line.
"""

from __future__ import annotations

import calendar
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import BinaryIO

STREAMS = (b"stdout", b"stderr")
TAG_PARTIAL = b"P"
TAG_DELIMITER = b":"
CHUNK_BYTES = 1 << 20  # how much of a log one read takes at most
_TAIL_BLOCK = 64 * 1024

# RFC 3339 as Go's time.Parse reads upstream's layout "2006-01-02T15:04:05.999999999Z07:00": the
# fraction is optional and may have any number of digits (beyond nine they are dropped).
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:(Z)|([+-])(\d\d):(\d\d))")
_NS = 1_000_000_000


class LogFormatError(ValueError):
    pass


@dataclass(frozen=True)
class Timestamp:
    """An instant to the nanosecond (what datetime cannot hold), with the UTC offset it was written in
    so it prints back in that offset, as upstream's time.Time does. Compare instants by `ns`."""

    ns: int  # since the epoch
    offset: int = 0  # seconds east of UTC

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        m = _RFC3339.fullmatch(text)
        if m is None:
            raise LogFormatError(f"not an RFC 3339 time: {text[:40]!r}")
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        offset = 0
        if m.group(9):
            off_h, off_m = int(m.group(10)), int(m.group(11))
            if off_h > 23 or off_m > 59:
                raise LogFormatError(f"time zone offset out of range: {text[:40]!r}")
            offset = (off_h * 3600 + off_m * 60) * (-1 if m.group(9) == "-" else 1)
        try:
            datetime(year, month, day, hour, minute, second)  # rejects day 31 of June, second 60, ...
        except ValueError as err:
            raise LogFormatError(f"{err}: {text[:40]!r}") from None
        seconds = calendar.timegm((year, month, day, hour, minute, second)) - offset
        fraction = int((m.group(7) or "")[:9].ljust(9, "0"))
        return cls(seconds * _NS + fraction, offset)

    @classmethod
    def from_datetime(cls, when: datetime) -> Timestamp:
        """An aware datetime (a naive one is taken as UTC)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        delta = when - datetime(1970, 1, 1, tzinfo=UTC)
        ns = (delta.days * 86400 + delta.seconds) * _NS + delta.microseconds * 1000
        utcoffset = when.utcoffset()
        return cls(ns, int(utcoffset.total_seconds()) if utcoffset else 0)

    def datetime(self) -> datetime:
        """As an aware datetime (truncated to microseconds), in the offset it was written in."""
        utc = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=self.ns // 1000)
        return utc.astimezone(timezone(timedelta(seconds=self.offset)))

    def format(self) -> str:
        """upstream's RFC3339NanoFixed ("2006-01-02T15:04:05.000000000Z07:00"): always nine digits."""
        local = datetime(1970, 1, 1) + timedelta(seconds=self.ns // _NS + self.offset)
        if self.offset == 0:
            zone = "Z"
        else:
            sign = "-" if self.offset < 0 else "+"
            hours, rest = divmod(abs(self.offset), 3600)
            zone = f"{sign}{hours:02d}:{rest // 60:02d}"
        return f"{local:%Y-%m-%dT%H:%M:%S}.{self.ns % _NS:09d}{zone}"


@dataclass(frozen=True)
class LogRecord:
    """One line of a CRI log file."""

    time: Timestamp
    stream: str  # "stdout" or "stderr"
    partial: bool  # tag P: the line goes on in the next record
    content: bytes  # without the file's newline

    def render(self, timestamps: bool = False) -> bytes:
        """What `kubectl logs` prints for this record (upstream's logWriter)."""
        prefix = self.time.format().encode() + b" " if timestamps else b""
        return prefix + self.content + (b"" if self.partial else b"\n")


def parse_record(line: bytes) -> LogRecord:
    """One line of the file (with or without its newline); LogFormatError if it is not in CRI format."""
    line = line[:-1] if line.endswith(b"\n") else line
    parts = line.split(b" ", 3)
    if len(parts) < 4:
        raise LogFormatError(f"not a CRI log line: {line[:80]!r}")
    stamp, stream, tags, content = parts
    if stream not in STREAMS:
        raise LogFormatError(f"unexpected stream type {stream[:20]!r}")
    time = Timestamp.parse(stamp.decode("ascii", errors="replace"))
    return LogRecord(time, stream.decode(), tags.split(TAG_DELIMITER)[0] == TAG_PARTIAL, content)


def parse_records(data: bytes) -> list[LogRecord]:
    """Every record in `data` (complete lines); lines not in CRI format are skipped, as upstream's."""
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            out.append(parse_record(line))
        except LogFormatError:
            continue
    return out


class LogFile:
    """A container's log file read record by record from an offset, as a follower reads it: only
    complete lines are taken (a line being written is read again next time), and a file replaced or
    truncated under the reader (rotation) is read from its start. Blocking: call it from a thread."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self._inode: int | None = None

    def seek_tail(self, lines: int) -> None:
        """Start at the last `lines` complete lines (upstream's FindTailLineStartIndex)."""
        try:
            with open(self.path, "rb") as f:
                self._inode = os.fstat(f.fileno()).st_ino
                self.offset = tail_offset(f, lines)
        except OSError:
            self.offset = 0

    def read(self, max_bytes: int = CHUNK_BYTES) -> list[LogRecord]:
        """The records of the complete lines after the offset (at most about max_bytes of them)."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if (self._inode is not None and st.st_ino != self._inode) or st.st_size < self.offset:
                    self.offset = 0
                self._inode = st.st_ino
                f.seek(self.offset)
                data = f.read(max_bytes)
                while b"\n" not in data and (more := f.read(max_bytes)):
                    data += more  # one line longer than a chunk: read on to its end
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return parse_records(data[:end])


def tail_offset(f: BinaryIO, lines: int) -> int:
    """Where the last `lines` complete lines of the file begin: just after the (lines + 1)-th newline
    from the end, so an incomplete last line is not counted (upstream's FindTailLineStartIndex)."""
    if lines < 0:
        return 0
    pos = f.seek(0, os.SEEK_END)
    wanted = lines + 1
    while pos > 0:
        start = max(0, pos - _TAIL_BLOCK)
        f.seek(start)
        block = f.read(pos - start)
        at = len(block)
        while (at := block.rfind(b"\n", 0, at)) >= 0:
            wanted -= 1
            if wanted == 0:
                return start + at + 1
        pos = start
    return 0


def read_tail(path: str, lines: int, max_bytes: int) -> bytes:
    """The end of the log as `kubectl logs --tail=lines` prints it, cut to its last max_bytes (what
    upstream's FallbackToLogsOnError reads into its 2048-byte ring buffer)."""
    log = LogFile(path)
    log.seek_tail(lines)
    out = b""
    while records := log.read():
        out = (out + b"".join(r.render() for r in records))[-max_bytes:]
    return out


@dataclass(frozen=True)
class LogEntry:
    """A whole line as the container wrote it: partial records joined, the first one's time."""

    at: Timestamp
    stream: str
    content: str

    @property
    def timestamp(self) -> str:
        return self.at.format()

    @property
    def time(self) -> datetime:
        return self.at.datetime()


def read_entries(lines: Iterable[str | bytes]) -> Iterator[LogEntry]:
    """Whole lines, partial records joined per stream; a partial record the container never finished
    (it exited mid-line) is a line of its own at the end. LogFormatError on a line not in CRI format."""
    pending: dict[str, tuple[Timestamp, list[bytes]]] = {}
    for raw in lines:
        line = raw.encode() if isinstance(raw, str) else raw
        if not line.strip():
            continue
        record = parse_record(line)
        first, parts = pending.pop(record.stream, (record.time, []))
        parts.append(record.content)
        if record.partial:
            pending[record.stream] = (first, parts)
        else:
            yield LogEntry(first, record.stream, b"".join(parts).decode(errors="replace"))
    for stream, (first, parts) in pending.items():
        yield LogEntry(first, stream, b"".join(parts).decode(errors="replace"))


def read_log_file(path: str) -> list[LogEntry]:
    with open(path, "rb") as f:
        return list(read_entries(f))
