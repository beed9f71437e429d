"""Run the scheduler as a child process of the caller, for `pykubelet server`.

Why a process and not a task on the server's loop: the scheduler is an API client, so in-process every
binding crosses TLS twice on one core, and the server's and the scheduler's work share one event loop;
the bench (bench/scheduler/throughput.py, embedded-stream vs stream) measured between a third and nine
tenths of the two-process throughput on this 2-core machine, depending on its other load. The child is the plain
`pykubelet scheduler` command, restarted with backoff if it dies, and stopped (SIGTERM, then SIGKILL)
when `stop` is set, so nothing outlives its owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

log = logging.getLogger(__name__)


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: have the kernel SIGTERM it when the server dies, even by SIGKILL,
    so a crashed server never leaves an orphan scheduler behind (Linux only; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def scheduler_command(kubeconfig: Path, config_file: Path | None = None, verbose: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "pykubelet", "scheduler", "--kubeconfig", str(kubeconfig)]
    if config_file is not None:
        cmd += ["--config", str(config_file)]
    if verbose:
        cmd.append("-v")
    return cmd


async def run_scheduler_process(
    kubeconfig: Path,
    config_file: Path | None,
    stop: asyncio.Event,
    log_path: Path | None = None,
    started: asyncio.Queue[int] | None = None,
    grace: float = 10.0,
) -> None:
    """Keep one scheduler child running until `stop` is set. Each child's pid goes to `started`
    (tests use it). Its output goes to `log_path` (appended), or to this process's stderr."""
    failures = 0
    while not stop.is_set():
        # A descriptor only the child keeps open (opening a local log file does not block for long).
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log_path else None
        try:
            child = await asyncio.create_subprocess_exec(
                *scheduler_command(kubeconfig, config_file), stdout=out if out is not None else sys.stderr,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            if out is not None:
                os.close(out)
        log.info("scheduler process started pid=%d", child.pid)
        if started is not None:
            started.put_nowait(child.pid)
        exited = asyncio.create_task(child.wait())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([exited, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            await _terminate(child, exited, grace)
            return
        failures += 1
        delay = min(0.5 * 2 ** min(failures, 5), 10.0)
        log.warning("scheduler process exited code=%s restart_in=%.1fs", child.returncode, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


async def _terminate(child: asyncio.subprocess.Process, exited: asyncio.Task[int], grace: float) -> None:
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(exited), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
    await exited
    log.info("scheduler process stopped code=%s", child.returncode)
