"""bench/pyspy.py: py-spy's raw stacks summed into each function's self and inclusive share, from a
hand-written sample and from py-spy itself sampling a real process that spins in a known function."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench import pyspy

RAW = """\
<module> (app.py:9);serve (app/server.py:40);encode (json/__init__.py:231) 6
<module> (app.py:9);serve (app/server.py:40);handle (app/handlers.py:12) 3
<module> (app.py:9);serve (app/server.py:41) 1
"""


def test_summary_counts_the_innermost_frame_as_self_and_every_frame_once_as_inclusive() -> None:
    s = pyspy.summary(RAW)
    assert s["samples"] == 10
    assert s["self_pct"] == [
        ("json/__init__.py:encode", 60.0),
        ("app/handlers.py:handle", 30.0),
        ("app/server.py:serve", 10.0),
    ]
    inclusive = dict(s["inclusive_pct"])  # type: ignore[arg-type]
    assert inclusive["app.py:<module>"] == 100.0
    assert inclusive["app/server.py:serve"] == 100.0  # on the stack twice in no sample, once in each
    assert inclusive["json/__init__.py:encode"] == 60.0


def test_summary_of_nothing_is_empty_not_a_division_by_zero() -> None:
    assert pyspy.summary("") == {"samples": 0, "self_pct": [], "inclusive_pct": []}


SPIN = """
import time
def spin_here():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        sum(range(1000))
print("ready", flush=True)
spin_here()
"""


@pytest.mark.integration
@pytest.mark.skipif(pyspy.binary() is None, reason="py-spy is not installed (test extra)")
def test_sampler_names_the_function_a_real_process_spends_its_cpu_in(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        proc = psutil.Process(child.pid)
        sampler = pyspy.Sampler(child.pid, tmp_path / "raw.txt", rate=200)
        start, deadline = sum(proc.cpu_times()[:2]), time.monotonic() + 20
        # Samples to take: the child's first CPU second under py-spy (bounded; a loaded machine is slow).
        while sum(proc.cpu_times()[:2]) - start < 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        s = sampler.stop()
    finally:
        child.kill()
        child.wait()
    assert s["samples"] > 0
    inclusive = dict(s["inclusive_pct"])  # type: ignore[arg-type]
    assert inclusive.get("<string>:spin_here", 0) > 50, s
