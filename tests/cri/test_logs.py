from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cri.logs import LogFile, LogFormatError, Timestamp, parse_record, read_entries, read_tail


def test_full_and_partial_lines_are_joined_per_stream() -> None:
    raw = [
        "2026-11-29T14:00:00.123456789Z stdout P hel\n",
        "2026-11-29T14:00:00.200000000Z stderr F oops\n",
        "2026-11-29T14:00:00.300000000Z stdout F lo world\n",
        "2026-11-29T14:00:01.000000000Z stdout F \n",
    ]
    entries = list(read_entries(raw))
    assert [(e.stream, e.content) for e in entries] == [
        ("stderr", "oops"),
        ("stdout", "hello world"),
        ("stdout", ""),
    ]
    assert entries[1].timestamp == "2026-11-29T14:00:00.123456789Z"
    assert entries[1].time.microsecond == 123456


def test_garbage_is_rejected() -> None:
    with pytest.raises(LogFormatError):
        list(read_entries(["not a log line at all\n"]))


def test_time_with_an_utc_offset_is_the_same_instant() -> None:
    """containerd writes its node's local time: the offset is part of the instant, never fraction digits."""
    [entry] = read_entries(["2016-10-06T02:17:09.669794202+02:00 stdout F text\n"])
    assert entry.time == datetime(2016, 10, 6, 0, 17, 9, 669794, tzinfo=UTC)
    assert entry.time.utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize(
    ("text", "ns", "printed"),
    [
        ("2016-10-06T00:17:09.669794202Z", 1475713029_669794202, "2016-10-06T00:17:09.669794202Z"),
        ("2016-10-06T00:17:09.6697942Z", 1475713029_669794200, "2016-10-06T00:17:09.669794200Z"),
        ("2016-10-06T00:17:09Z", 1475713029_000000000, "2016-10-06T00:17:09.000000000Z"),
        ("2016-10-06T02:17:09.5+02:00", 1475713029_500000000, "2016-10-06T02:17:09.500000000+02:00"),
        ("2016-10-05T19:47:09.000000001-04:30", 1475713029_000000001, "2016-10-05T19:47:09.000000001-04:30"),
        ("2016-10-06T00:17:09.1234567891234Z", 1475713029_123456789, "2016-10-06T00:17:09.123456789Z"),
        ("2016-10-06T00:17:09.25+00:00", 1475713029_250000000, "2016-10-06T00:17:09.250000000Z"),
    ],
)
def test_rfc3339_to_the_nanosecond(text: str, ns: int, printed: str) -> None:
    stamp = Timestamp.parse(text)
    assert stamp.ns == ns
    assert stamp.format() == printed  # upstream's RFC3339NanoFixed
    assert Timestamp.from_datetime(stamp.datetime()).ns == ns // 1000 * 1000


@pytest.mark.parametrize(
    "text",
    [
        "2016-10-06 00:17:09Z",
        "2016-10-06T00:17:09",
        "2016-10-06T00:17:09.Z",
        "2016-06-31T00:00:00Z",
        "2016-10-06T00:17:60Z",
        "2016-10-06T00:17:09+24:00",
        "2016-10-06T00:17:09.5+0200",
        "yesterday",
    ],
)
def test_not_rfc3339_is_a_format_error(text: str) -> None:
    with pytest.raises(LogFormatError):
        Timestamp.parse(text)


def test_record_renders_as_kubectl_logs_prints_it() -> None:
    full = parse_record(b"2016-10-06T00:17:09.669794202Z stdout F text\n")
    partial = parse_record(b"2016-10-06T00:17:09.7Z stderr P:x DONE\n")
    assert (full.stream, full.partial, full.content) == ("stdout", False, b"text")
    assert (partial.stream, partial.partial, partial.content) == ("stderr", True, b"DONE")
    assert full.render() + partial.render() == b"text\nDONE"
    assert partial.render(timestamps=True) == b"2016-10-06T00:17:09.700000000Z DONE"
    with pytest.raises(LogFormatError):
        parse_record(b"2016-10-06T00:17:09Z stdout F")  # no content field: upstream's "log tag is not found"


def test_last_partial_record_is_its_own_line() -> None:
    entries = list(
        read_entries(["2026-11-29T14:00:00Z stdout F first\n", "2026-11-29T14:00:01Z stdout P DONE\n"])
    )
    assert [e.content for e in entries] == ["first", "DONE"]


LINES = [f"2026-11-29T14:00:0{i}.000000001Z stdout F line {i}\n".encode() for i in range(5)]


@pytest.mark.parametrize(("lines", "start"), [(0, 5), (1, 4), (2, 3), (5, 0), (9, 0), (-1, 0)])
def test_tail_counts_complete_lines_from_the_end(tmp_path: Path, lines: int, start: int) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"".join(LINES) + b"2026-11-29T14:00:09Z stdout F being writ")
    log = LogFile(str(path))
    log.seek_tail(lines)
    assert log.offset == len(b"".join(LINES[:start]))
    assert [r.content for r in log.read()] == [f"line {i}".encode() for i in range(start, 5)]


def test_follower_takes_complete_lines_and_starts_over_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(LINES[0] + LINES[1][:20])
    log = LogFile(str(path))
    assert [r.content for r in log.read()] == [b"line 0"]
    with path.open("ab") as f:
        f.write(LINES[1][20:] + b"garbage that is not a CRI line\n" + LINES[2])
    assert [r.content for r in log.read()] == [b"line 1", b"line 2"]
    assert log.read() == []
    rotated = tmp_path / "0.log.new"
    rotated.write_bytes(LINES[3] * 10)
    rotated.rename(path)  # a bigger file in the old one's place: read from its start
    assert [r.content for r in log.read()] == [b"line 3"] * 10


def test_read_tail_is_the_rendered_end_cut_to_bytes(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    path.write_bytes(b"".join(LINES) + b"2026-11-29T14:00:09Z stdout P DONE\n")
    assert read_tail(str(path), 2, 2048) == b"line 4\nDONE"
    assert read_tail(str(path), 80, 8) == b"e 4\nDONE"
