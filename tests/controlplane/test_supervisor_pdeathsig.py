"""A component the API server supervises dies with the server, even when the server is SIGKILLed (the
kernel's parent-death signal, set before exec without a Python pre-exec callback)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from controlplane.supervisor import _dying_with_parent
from e2e.waiting import wait_for

PARENT = textwrap.dedent(
    """
    import asyncio, sys
    from controlplane.supervisor import supervise

    async def main():
        started = asyncio.Queue()
        task = asyncio.create_task(supervise(["sleep", "600"], asyncio.Event(), started=started))
        print(await started.get(), flush=True)
        await task

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _exe(pid: int) -> str:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name
    except OSError:
        return ""


def test_the_child_is_started_through_setpriv_with_a_parent_death_signal() -> None:
    argv = _dying_with_parent(["sleep", "1"])
    assert Path(argv[0]).name == "setpriv" and argv[1:4] == ["--pdeathsig", "TERM", "--"]
    assert argv[4:] == ["sleep", "1"]


def test_a_supervised_child_dies_when_its_server_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        # setpriv arms the signal and then execs: once the child is `sleep`, the signal is armed. Killing
        # the server before that is the window kubeclient/orphan.py covers for the components (a plain
        # `sleep` has no such guard), so the test waits it out rather than race it.
        wait_for(lambda: _exe(child) == "sleep", timeout=10, interval=0.02, what=f"pid {child} to exec sleep")
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        wait_for(
            lambda: not _alive(child), timeout=10, interval=0.05, what=f"pid {child} to die with its parent"
        )
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
