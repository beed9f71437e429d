from __future__ import annotations

import pytest

from agent.cri.logs import LogFormatError, read_entries


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
