"""pykubelet.rig.supervisor on real processes (short `sleep`s standing in for the stack's daemons): a
daemon that dies is started again after its back-off, which doubles while it keeps dying; a restart
asked for (`pykubelet restart`) skips the back-off; the new pid lands in supervised.json and in the
stack record `down` reads; the remains of a dead daemon's process group go before it starts again."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.waiting import wait_for
from pykubelet.rig.process import pid_alive
from pykubelet.rig.record import StackRecord
from pykubelet.rig.supervisor import Supervised, Supervisor, load, request_restart, save, spawn


def _pid(state: Path) -> int:
    return load(state)[0].pid


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[tuple[Path, Supervisor]]:
    StackRecord(str(tmp_path), "n", "", {}, "", "", "", "").save()
    daemon = Supervised(
        name="proxy",
        argv=["sh", "-c", "sleep 300 & wait"],  # a leader with a child in its group
        log_path=str(tmp_path / "proxy.log"),
        record_dir=str(tmp_path),
        record_key="proxy",
    )
    daemon.pid = spawn(daemon)
    save(tmp_path, [daemon])
    supervisor = Supervisor(tmp_path)
    thread = threading.Thread(target=supervisor.run, daemon=True)
    thread.start()
    try:
        yield tmp_path, supervisor
    finally:
        supervisor.stop()
        thread.join(timeout=5)
        for d in load(tmp_path):
            try:
                os.killpg(d.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _died_then_back(state: Path, kill: bool = True) -> tuple[int, float]:
    old = _pid(state)
    if kill:
        os.kill(old, signal.SIGKILL)
    died = time.monotonic()
    new = wait_for(lambda: (p := _pid(state)) != old and pid_alive(p) and p, timeout=20, interval=0.05)
    return new, time.monotonic() - died


def test_a_dead_daemon_is_started_again_with_a_growing_back_off(supervised: tuple[Path, Supervisor]) -> None:
    state, _ = supervised
    first = _pid(state)
    child = wait_for(lambda: [p for p in _group(first) if p != first], timeout=5)[0]
    new, gap1 = _died_then_back(state)
    assert StackRecord.load(state).pids["proxy"] == new  # type: ignore[union-attr]
    assert not pid_alive(child)  # the dead leader's group went with it
    _, gap2 = _died_then_back(state)
    assert 0.9 <= gap1 < 1.9 and 1.9 <= gap2 < 3.5, (gap1, gap2)
    assert load(state)[0].restarts == 2


def test_a_restart_asked_for_skips_the_back_off(supervised: tuple[Path, Supervisor]) -> None:
    state, _ = supervised
    _died_then_back(state)  # the back-off has grown
    request_restart(state, "proxy")
    os.killpg(_pid(state), signal.SIGTERM)
    _, gap = _died_then_back(state, kill=False)
    assert gap < 0.9


def _group(pgid: int) -> list[int]:
    import psutil

    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                out.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return out
