"""Running one daemon as a child process: start, wait until it answers, stop, and keep its log.

Every daemon the project starts (registry, containerd, API server, agent) goes through `Daemon`, so
start-up failures always show the daemon's own log and stopping is always SIGTERM, a grace period,
then SIGKILL of the whole process group.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

T = TypeVar("T")


# Ports the rig hands its daemons: below the kernel's ephemeral range (32768-60999 by default), so no
# outgoing connection of any process takes one between the pick and the daemon's bind (with several
# sessions' stacks on one host that happened: a proxy's healthz port was taken by someone's client), and
# below the Services' node ports (30000-32767), which every stack's proxy DNATs on all local addresses.
RIG_PORTS = range(20000, 30000)


def bindable(host: str, port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):  # DNS serves both on one port
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# A port handed out is reserved for RESERVATION_SECONDS (longer than any daemon takes from the pick to its
# bind) by a file of that name here, made with O_EXCL: neither this process nor another session's (the
# suite runs tests/, e2e/ and `pykubelet up` processes side by side) hands it out again meanwhile. A
# daemon's port was twice taken by another stack's daemon picked in the same second.
RESERVATIONS = Path(os.environ.get("PYKUBELET_PORT_RESERVATIONS", "/run/pykubelet/port-reservations"))
RESERVATION_SECONDS = 600.0


_swept = False


def forget_expired_reservations() -> int:
    """Delete the reservations whose time is up (a pick's file stays until then; without this they
    would pile up, one per port ever handed out). Returns how many went. `free_port` calls it once per
    process, `pykubelet down` on each run."""
    gone = 0
    now = time.time()
    try:
        entries = list(os.scandir(RESERVATIONS))
    except FileNotFoundError:
        return 0
    for entry in entries:
        try:
            if now - entry.stat().st_mtime >= RESERVATION_SECONDS:
                os.unlink(entry.path)
                gone += 1
        except FileNotFoundError:
            pass  # another process swept it
    return gone


def _reserve(port: int) -> bool:
    """Whether `port` is now ours to hand out (no live reservation of another pick holds it)."""
    path = RESERVATIONS / str(port)
    for _ in range(2):
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileNotFoundError:
            RESERVATIONS.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            try:
                if time.time() - path.stat().st_mtime < RESERVATION_SECONDS:
                    return False
                path.unlink()  # an old pick's: expired
            except FileNotFoundError:
                pass
    return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody holds right now (TCP and UDP) and nobody was handed in the last RESERVATION_SECONDS,
    at random in RIG_PORTS; the OS's pick if none is."""
    global _swept
    if not _swept:
        _swept = True
        forget_expired_reservations()
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(RIG_PORTS.start, RIG_PORTS.stop)
        if bindable(host, port) and (host == "0.0.0.0" or bindable("0.0.0.0", port)) and _reserve(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class DaemonError(RuntimeError):
    pass


@dataclass
class Daemon:
    """A child process in its own process group, logging to log_path."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    # Called with the pid as soon as the process exists, before it is ready: an owner that records its
    # daemons (stack.json) can then find one that was interrupted while starting.
    on_spawn: Callable[[int], None] | None = field(default=None, repr=False)
    proc: subprocess.Popen | None = field(default=None, init=False)

    def start(self, ready: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> None:
        """Start and poll `ready` until it is true; on failure stop the process and raise with its log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        finally:
            log.close()
        if self.on_spawn is not None:
            self.on_spawn(self.proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaemonError(
                    f"{self.name} exited with code {self.proc.returncode} during start-up:\n{self.log_tail()}"
                )
            try:
                if ready():
                    return
            except Exception:  # not ready yet, whatever the reason
                pass
            time.sleep(interval)
        self.stop()
        raise DaemonError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    @classmethod
    def adopt(cls, name: str, pid: int, log_path: Path) -> Daemon:
        """A Daemon for a process an earlier run started (found again from a pid file)."""
        daemon = cls(name, [], log_path)
        daemon._adopted_pid = pid
        return daemon

    _adopted_pid: int | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        if self.proc is not None:
            return self.proc.pid
        return self._adopted_pid

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None  # also reaps our child once it exits
        return self._adopted_pid is not None and pid_alive(self._adopted_pid)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, wait up to grace seconds, then SIGKILL it."""
        pgid = self.pid
        if pgid is None:
            return
        if self.running():
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.05)
        # SIGKILL whatever is left of the group, leader or children that outlived it.
        _signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.proc = None
        self._adopted_pid = None

    def kill(self) -> None:
        """SIGKILL the leader only, as a crash would (its children, if any, stay)."""
        pid = self.pid
        if pid is not None and self.running():
            os.kill(pid, signal.SIGKILL)
            while self.running():
                time.sleep(0.02)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_blocking(coro_factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from synchronous code, even when an event loop is already running
    in this thread (a pytest-asyncio test calling a rig helper): then it runs on a private loop in a
    helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro_factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(coro_factory())).result()
