"""What `pykubelet up` and `join` show while they work: one line per finished stage with its elapsed time,
on a terminal a live line for the stage under way (its seconds ticking), and when a stage fails or is
interrupted, which stage, the last lines of its log and the log's path.

Stages come from the commands (packages, the sample pod) and from the rig's stack (registry, containerd,
API servers, each node, ...), which reports through the same object; the rig's own users (tests,
benchmarks) pass none and see nothing. It imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

TAIL_LINES = 15
TITLE_WIDTH = 28
CLEAR_LINE = "\r\x1b[K"

# A stage's log: a path, or a function giving it once the stage knows it (the daemon it started).
LogRef = Path | Callable[[], Path | None] | None


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def _signal_name(stop: BaseException) -> str:
    if isinstance(stop, KeyboardInterrupt):
        return "SIGINT"
    code = stop.code if isinstance(stop, SystemExit) else None
    if isinstance(code, int) and code > 128:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            pass
    return "an exit request"


class Progress:
    """Stage reporter writing to `out` (None: silent). `live` (default: whether `out` is a terminal)
    keeps a status line for the stage under way, redrawn every `tick` seconds. `before_stage`, called as
    each stage begins, may raise to stop there (`up` uses it for a signal whose exception was lost)."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        prefix: str = "pykubelet",
        live: bool | None = None,
        tick: float = 0.25,
        before_stage: Callable[[], None] | None = None,
    ) -> None:
        self.out = out
        self.prefix = prefix
        self.live = out is not None and (live if live is not None else _isatty(out))
        self.tick = tick
        self.before_stage = before_stage
        self.finished: list[tuple[str, float]] = []  # (title, seconds), in order
        self.failed: str = ""  # the title of the stage that failed or was interrupted
        self._reported: list[BaseException] = []  # the exceptions a stage already reported
        self._lock = threading.Lock()

    def reported(self, err: BaseException) -> bool:
        """Whether a stage already told the user about this exception (the command need not repeat it)."""
        return any(seen is err for seen in self._reported)

    def interrupted(self, err: BaseException) -> None:
        """Report a stop that came between stages (after the last finished one), unless a stage already
        reported a failure or an interruption."""
        if not self.failed and not self.reported(err):
            self._reported.append(err)
            last = self.finished[-1][0] if self.finished else "the start"
            self.failed = f"after {last}"
            self._write(f"{self.prefix}: interrupted after {last} ({_signal_name(err)})\n")

    @contextmanager
    def stage(self, title: str, log: LogRef = None) -> Iterator[None]:
        started = time.monotonic()
        stop_ticking = self._tick(title, started)
        try:
            if self.before_stage is not None:
                self.before_stage()
            yield
        except BaseException as err:
            stop_ticking()
            if not self.reported(err):
                self._reported.append(err)
                self.failed = title
                self._report_failure(title, time.monotonic() - started, _resolve(log), err)
            raise
        stop_ticking()
        elapsed = time.monotonic() - started
        self.finished.append((title, elapsed))
        self._write(f"{self.prefix}: {title:<{TITLE_WIDTH}} {elapsed:6.1f} s\n")

    def note(self, text: str) -> None:
        """A line of its own between the stage lines (clearing the live line first)."""
        self._write(f"{self.prefix}: {text}\n")

    # -- output ------------------------------------------------------------------------------------

    def _report_failure(self, title: str, elapsed: float, log: Path | None, err: BaseException) -> None:
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            lines = [f"{title} interrupted after {elapsed:.1f} s ({_signal_name(err)})"]
        else:
            message = (str(err).strip().splitlines() or [type(err).__name__])[0]
            lines = [f"{title} FAILED after {elapsed:.1f} s: {message}"]
            tail = log_tail(log) if log is not None else []
            if tail:
                lines.append(f"the last {len(tail)} lines of {log}:")
                lines += [f"    {line}" for line in tail]
        if log is not None:
            lines.append(f"{title} log: {log}" if log.exists() else f"{title} log: {log} (not written)")
        self._write("".join(f"{self.prefix}: {line}\n" for line in lines))

    def _write(self, text: str) -> None:
        if self.out is None:
            return
        with self._lock:
            self.out.write((CLEAR_LINE if self.live else "") + text)
            self.out.flush()

    def _tick(self, title: str, started: float) -> Callable[[], None]:
        """On a terminal, redraw `title ... N s` until the returned function is called (it clears it)."""
        if not self.live:
            return lambda: None
        done = threading.Event()

        def redraw() -> None:
            shown = -1
            while True:
                seconds = int(time.monotonic() - started)
                if seconds != shown:  # written when the count changes, checked every tick
                    with self._lock:
                        assert self.out is not None
                        self.out.write(f"{CLEAR_LINE}{self.prefix}: {title} ... {seconds} s")
                        self.out.flush()
                    shown = seconds
                if done.wait(self.tick):
                    return

        ticker = threading.Thread(target=redraw, name=f"progress {title}", daemon=True)
        ticker.start()

        def stop() -> None:
            done.set()
            ticker.join()
            with self._lock:
                assert self.out is not None
                self.out.write(CLEAR_LINE)
                self.out.flush()

        return stop


def _resolve(log: LogRef) -> Path | None:
    try:
        return log() if callable(log) else log
    except Exception:  # the part whose log it names never came to be
        return None


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
