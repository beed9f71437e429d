"""Go-style durations ("15s", "500ms", "1m30s", "5m0s") as upstream's component configs and flags
write them; one parser for the agent's KubeletConfiguration, the scheduler's and the controller
manager's settings."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | int | float) -> float:
    """Seconds; a bare number is taken as seconds already. ValueError if it is not a duration."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(f"invalid duration {value!r}")
    return total


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_TERM = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def parse_go_duration(text: str) -> float:
    """Seconds from Go's time.ParseDuration syntax, strictly: a unit on every number except a lone "0",
    an optional sign; ValueError with Go's own message ("time: unknown unit ...") otherwise."""
    orig, s, sign = text, text, 1.0
    if s[:1] in "+-" and s:
        sign, s = (-1.0 if s[0] == "-" else 1.0), s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f'time: invalid duration "{orig}"')
    total = 0.0
    while s:
        m = _GO_TERM.match(s)
        whole, frac, unit = (m.group(1), m.group(2), m.group(3)) if m else ("", None, "")
        if not whole and not frac:
            raise ValueError(f'time: invalid duration "{orig}"')
        if not unit:
            raise ValueError(f'time: missing unit in duration "{orig}"')
        # the unit runs up to the next digit or dot (Go reads it the same way)
        if unit not in _GO_UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{orig}"')
        total += float(f"{whole or 0}.{frac or 0}") * _GO_UNITS[unit]
        s = s[m.end() :] if m else ""
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Go's Duration.String() for whole and fractional seconds: "1h0m0s", "1m30s", "500ms", "0s"."""
    if seconds == 0:
        return "0s"
    if abs(seconds) < 1:
        ms = seconds * 1000
        return f"{ms:g}ms" if abs(ms) >= 1 else f"{seconds * 1e6:g}µs"
    sign = "-" if seconds < 0 else ""
    rest = abs(seconds)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    secs_text = f"{secs:g}s"
    if hours:
        return f"{sign}{int(hours)}h{int(minutes)}m{secs_text}"
    if minutes:
        return f"{sign}{int(minutes)}m{secs_text}"
    return f"{sign}{secs_text}"
