"""Run a control-plane component as a child process of `pykubelet server`: the scheduler today, the
controller manager next.

Why a process and not a task on the server's loop: each component is an API client, so in-process every
call crosses TLS twice on one core, and the server's and the component's work share one event loop; the
bench (bench/scheduler/throughput.py, embedded-stream vs stream) measured between a third and nine tenths
of the two-process throughput for the scheduler on this 2-core machine, depending on its other load. The
child is the component's plain `pykubelet <component>` command, restarted with backoff if it dies, and
stopped (SIGTERM, then SIGKILL) when `stop` is set, so nothing outlives its owner; the kernel also
SIGTERMs it if the server dies (PR_SET_PDEATHSIG), even by SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

from kubeclient.eventwait import wait_event
from kubeclient.orphan import parent_environment

log = logging.getLogger(__name__)


def _dying_with_parent(command: list[str]) -> list[str]:
    """`command` run so the kernel SIGTERMs it when the server dies, even by SIGKILL (PR_SET_PDEATHSIG),
    so a crashed server never leaves an orphan scheduler behind. util-linux's `setpriv` sets it before
    exec, rather than a `preexec_fn`: no Python code runs between fork and exec (where a fork's copy of
    gRPC's state is unsafe), and the standard loop can vfork. The child closes the race of a server dying
    before the signal is armed itself (kubeclient/orphan.py); gRPC's at-fork handlers are off in every
    component (pykubelet/cli.py), since uvloop's spawn forks (grpc/grpc#28557: they broke the server's
    etcd TLS stream, "Stream removed", TSI_DATA_CORRUPTED)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # not Linux, or util-linux missing: the child outlives a killed server
        return command
    return [setpriv, "--pdeathsig", "TERM", "--", *command]


def component_command(
    component: str,
    kubeconfig: Path,
    config_file: Path | None = None,
    verbosity: int = 0,
    logging_format: str = "text",
) -> list[str]:
    """`pykubelet <component> --kubeconfig K [--config C] -v N --logging-format F` with this
    interpreter (the children log as their parent was asked to)."""
    cmd = [sys.executable, "-m", "pykubelet", component, "--kubeconfig", str(kubeconfig)]
    if config_file is not None:
        cmd += ["--config", str(config_file)]
    return [*cmd, f"-v={verbosity}", f"--logging-format={logging_format}"]


async def supervise(
    command: list[str],
    stop: asyncio.Event,
    log_path: Path | None = None,
    started: asyncio.Queue[int] | None = None,
    grace: float = 10.0,
) -> None:
    """Keep one child running `command` until `stop` is set. Each child's pid goes to `started`
    (tests use it). Its output goes to `log_path` (appended), or to this process's stderr."""
    name = command[3] if len(command) > 3 else command[0]
    argv = _dying_with_parent(command)
    failures = 0
    while not stop.is_set():
        # A descriptor only the child keeps open (opening a local log file does not block for long).
        out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if log_path else None
        try:
            child = await asyncio.create_subprocess_exec(
                *argv,
                stdout=out if out is not None else sys.stderr,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **parent_environment()},
            )
        finally:
            if out is not None:
                os.close(out)
        log.info("%s process started pid=%d", name, child.pid)
        if started is not None:
            started.put_nowait(child.pid)
        exited = asyncio.create_task(child.wait())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([exited, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if stop.is_set():
            await _terminate(name, child, exited, grace)
            return
        failures += 1
        delay = min(0.5 * 2 ** min(failures, 5), 10.0)
        log.warning("%s process exited code=%s restart_in=%.1fs", name, child.returncode, delay)
        with contextlib.suppress(TimeoutError):
            await wait_event(stop, delay)


async def _terminate(
    name: str, child: asyncio.subprocess.Process, exited: asyncio.Task[int], grace: float
) -> None:
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(exited)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.kill()
    await exited
    log.info("%s process stopped code=%s", name, child.returncode)
