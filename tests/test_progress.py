"""The stage reporter of `pykubelet up` and `join`: a line per finished stage with its time, a ticking
status line on a terminal only, and a failed or interrupted stage named with its log's tail and path."""

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest

from pykubelet.progress import CLEAR_LINE, Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_each_finished_stage_is_one_line_with_its_time() -> None:
    out = io.StringIO()
    progress = Progress(out)
    with progress.stage("registry"):
        pass
    with progress.stage("containerd"):
        pass
    lines = out.getvalue().splitlines()
    assert [re.fullmatch(r"pykubelet: (\S+) +(\d+\.\d) s", line) is not None for line in lines] == [
        True,
        True,
    ]
    assert [line.split()[1] for line in lines] == ["registry", "containerd"]
    assert [t for t, _ in progress.finished] == ["registry", "containerd"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()  # no live line off a terminal


def test_a_failed_stage_names_itself_its_log_tail_and_path(tmp_path: Path) -> None:
    log = tmp_path / "containerd.log"
    log.write_text("".join(f"line {i}\n" for i in range(40)) + "failed to listen: address already in use\n")
    out = io.StringIO()
    progress = Progress(out)
    with pytest.raises(RuntimeError) as raised, progress.stage("containerd", lambda: log):
        raise RuntimeError("pykubelet containerd exited with code 1 during start-up:\n(the log again)")
    text = out.getvalue()
    assert re.search(
        r"^pykubelet: containerd FAILED after \d+\.\d s: pykubelet containerd exited with code 1 during start-up:$",
        text,
        re.M,
    )
    assert f"pykubelet: the last 15 lines of {log}:" in text
    assert "pykubelet:     failed to listen: address already in use" in text
    assert "line 25\n" not in text and "line 26\n" in text  # the tail only
    assert text.rstrip().endswith(f"pykubelet: containerd log: {log}")
    assert progress.reported(raised.value) and progress.failed == "containerd"


def test_an_outer_stage_does_not_repeat_an_inner_failure() -> None:
    out = io.StringIO()
    progress = Progress(out)
    with pytest.raises(ValueError), progress.stage("node n2"), progress.stage("containerd of n2"):
        raise ValueError("boom")
    assert out.getvalue().count("FAILED") == 1 and progress.failed == "containerd of n2"


def test_an_interrupted_stage_names_the_signal_and_the_log(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = Progress(out)
    with pytest.raises(SystemExit), progress.stage("API server", tmp_path / "apiserver.log"):
        raise SystemExit(143)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("pykubelet: API server interrupted after ") and lines[0].endswith("(SIGTERM)")
    assert lines[1] == f"pykubelet: API server log: {tmp_path / 'apiserver.log'} (not written)"


def test_a_stop_between_stages_names_the_last_finished_one() -> None:
    out = io.StringIO()
    progress = Progress(out)
    with progress.stage("DNS"):
        pass
    stop = SystemExit(129)
    progress.interrupted(stop)
    progress.interrupted(stop)  # once only
    assert out.getvalue().splitlines()[1:] == ["pykubelet: interrupted after DNS (SIGHUP)"]


def test_before_stage_can_stop_at_the_next_stage() -> None:
    out = io.StringIO()

    def stop() -> None:
        raise SystemExit(143)

    with pytest.raises(SystemExit), Progress(out, before_stage=stop).stage("images"):
        raise AssertionError("the stage body must not run")
    assert out.getvalue().startswith("pykubelet: images interrupted after")


def test_on_a_terminal_the_stage_under_way_ticks() -> None:
    out = Terminal()
    progress = Progress(out, tick=0.05)
    shown = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "images ... 1 s" not in out.getvalue():
            time.sleep(0.01)
        shown.set()

    with progress.stage("images"):
        watcher = threading.Thread(target=watch)
        watcher.start()
        shown.wait(15)
        watcher.join()
    text = out.getvalue()
    assert f"{CLEAR_LINE}pykubelet: images ... 0 s" in text
    assert f"{CLEAR_LINE}pykubelet: images ... 1 s" in text  # the seconds tick
    final = text.rsplit(CLEAR_LINE, 1)[1]
    assert re.fullmatch(r"pykubelet: images +1\.\d s\n", final), (
        final
    )  # the status line gave way to the stage line
