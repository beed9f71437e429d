"""Where a benchmark's Python processes spend their CPU, by py-spy's samples of the measured phase.

`perfprofile.py` names C symbols (TLS, JSON, the interpreter); this names Python functions, which is what
a change to our code needs: `Sampler(pid, raw)` records the process's stacks (py-spy's raw format, one
line per distinct stack with its count; idle threads are not sampled, so the samples are CPU time) until
`stop()`, which returns `summary()`: each function's share of the samples, as the innermost frame (self)
and anywhere on the stack (inclusive), the top entries of each. py-spy is the test extra's
(`pip install -e .[test]`); `binary()` finds it beside the running interpreter.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def binary() -> str | None:
    """py-spy of this interpreter's environment, else the one on PATH (None: not installed)."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def frame_name(frame: str) -> str:
    """py-spy's `func (path:line)` as `path:func` (py-spy already shortens the path to the module's)."""
    m = _FRAME.match(frame.strip())
    return frame.strip() if m is None else f"{m.group('file')}:{m.group('func')}"


def summary(raw: str, top: int = 25) -> dict[str, object]:
    """Self and inclusive shares (percent of all samples) of the top functions of py-spy's raw output."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame_name(f) for f in stack.split(";")]
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            anywhere[name] += count

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(top)]

    return {"samples": total, "self_pct": share(own), "inclusive_pct": share(anywhere)}


class Sampler:
    """py-spy recording one process (`--nonblocking`: the process is never paused) into `raw`."""

    def __init__(self, pid: int, raw: Path, rate: int = 100, py_spy: str | None = None) -> None:
        exe = py_spy or binary()
        if exe is None:
            raise RuntimeError("py-spy is not installed (it is in the test extra: pip install -e .[test])")
        self.raw = raw
        command = [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)]
        self._proc = subprocess.Popen(
            [*command, "--nonblocking", "--output", str(raw)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self, top: int = 25) -> dict[str, object]:
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        return summary(self.raw.read_text() if self.raw.exists() else "", top)
