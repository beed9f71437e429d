"""Reading container logs in the CRI log format.

containerd writes each line of a container's stdout/stderr as
`<RFC3339Nano timestamp> <stream> <tag> <content>`, where tag `F` ends a line and `P` marks a partial
one that continues in the next entry. `kubectl logs` (through the kubelet) needs the lines joined back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class LogEntry:
    timestamp: str  # as written by the runtime (RFC 3339 with nanoseconds)
    stream: str  # "stdout" or "stderr"
    content: str

    @property
    def time(self) -> datetime:
        """The timestamp, truncated to microseconds (what Python's datetime holds)."""
        ts = self.timestamp.replace("Z", "+00:00")
        head, _, rest = ts.partition(".")
        if rest:
            frac = "".join(ch for ch in rest if ch.isdigit())
            zone = rest[len(frac) :]
            ts = f"{head}.{frac[:6].ljust(6, '0')}{zone}"
        return datetime.fromisoformat(ts)


class LogFormatError(ValueError):
    pass


def parse_line(line: str) -> tuple[str, str, str, str]:
    """Split one raw line into (timestamp, stream, tag, content)."""
    parts = line.rstrip("\n").split(" ", 3)
    if len(parts) < 3 or parts[1] not in ("stdout", "stderr"):
        raise LogFormatError(f"not a CRI log line: {line[:80]!r}")
    content = parts[3] if len(parts) == 4 else ""
    return parts[0], parts[1], parts[2], content


def read_entries(lines: Iterable[str]) -> Iterator[LogEntry]:
    """Whole lines, partial (`P`) entries joined per stream; the timestamp is the first fragment's."""
    pending: dict[str, tuple[str, list[str]]] = {}
    for raw in lines:
        if not raw.strip():
            continue
        ts, stream, tag, content = parse_line(raw)
        first_ts, parts = pending.pop(stream, (ts, []))
        parts.append(content)
        if "P" in tag.split(":"):
            pending[stream] = (first_ts, parts)
        else:
            yield LogEntry(first_ts, stream, "".join(parts))
    for stream, (ts, parts) in pending.items():
        yield LogEntry(ts, stream, "".join(parts))


def read_log_file(path: str) -> list[LogEntry]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return list(read_entries(f))
