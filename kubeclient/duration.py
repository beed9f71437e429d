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
