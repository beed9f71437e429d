"""The stack's own supervisor, where systemd does not run the daemons: every daemon `up` starts (the
registry, the etcd members, the API servers, the service proxy, the DNS, the metrics server, each node's
agent and containerd) is started again when it dies, with back-off, as systemd's Restart=always with RestartSec would.

`up` writes what it started to `<state>/supervised.json` (each daemon's name, command line, log and the
record it appears in) and then starts `pykubelet supervise --state-dir <state>`, a process of its own
session that outlives `up`. The supervisor waits on a pidfd per daemon (the kernel says when a process
that is not our child exits: nothing is polled), starts a dead daemon again after its back-off, and
writes the new pid into supervised.json and into the stack record (`<dir>/stack.json`) that `down`
reads. `pykubelet restart NAME` stops one daemon on purpose; the supervisor then starts it at once
(a stop asked for is no crash: no back-off).

Back-off: 1 s after the first death, doubling to 30 s while a daemon keeps dying; a daemon that ran
for BACKOFF_RESET seconds starts again from 1 s.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kubeclient.backoff import Backoff
from pykubelet.rig.process import pid_alive
from pykubelet.rig.record import StackRecord

log = logging.getLogger("pykubelet.supervisor")

SUPERVISED_FILE = "supervised.json"
SUPERVISOR_LOG = "supervisor.log"
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 30.0
BACKOFF_RESET = 60.0
# A `pykubelet restart` asks for a restart by naming the daemon here; the supervisor skips the back-off.
REQUESTS_DIR = "supervisor-requests"


@dataclass
class Supervised:
    """One daemon under supervision."""

    name: str  # "apiserver", "apiserver-1", "proxy", "dns", "metrics-server", "agent", "containerd", ...
    argv: list[str]
    log_path: str
    record_dir: str  # the dir whose stack.json lists it (the stack's, or a further node's)
    record_key: str  # its key in that record's pids
    pid: int = 0
    # A daemon whose process group must not be killed with it (containerd: its shims keep the pods).
    kill_group: bool = True
    env: dict[str, str] | None = None
    restarts: int = field(default=0)


def supervised_path(state_dir: Path) -> Path:
    return state_dir / SUPERVISED_FILE


def load(state_dir: Path) -> list[Supervised]:
    try:
        return [Supervised(**d) for d in json.loads(supervised_path(state_dir).read_text())]
    except (OSError, ValueError, TypeError):
        return []


def save(state_dir: Path, daemons: list[Supervised]) -> None:
    """Write-then-rename, as the stack record: a reader never sees half a file."""
    path = supervised_path(state_dir)
    tmp = path.with_name(f".{SUPERVISED_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # command lines name credentials' files
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps([asdict(d) for d in daemons], indent=2))
    os.replace(tmp, path)


def request_restart(state_dir: Path, name: str) -> None:
    """Mark `name` as stopped on purpose (the supervisor restarts it without back-off)."""
    requests = state_dir / REQUESTS_DIR
    requests.mkdir(parents=True, exist_ok=True)
    (requests / name).touch()


def _requested(state_dir: Path, name: str) -> bool:
    marker = state_dir / REQUESTS_DIR / name
    try:
        marker.unlink()
    except FileNotFoundError:
        return False
    return True


def spawn(daemon: Supervised) -> int:
    """Start the daemon as `up` did: its own session, its log appended to."""
    Path(daemon.log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(daemon.log_path, "ab") as out:
        proc = subprocess.Popen(
            daemon.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=daemon.env,
            start_new_session=True,
        )
    return proc.pid


def _record_pid(daemon: Supervised) -> None:
    record = StackRecord.load(Path(daemon.record_dir))
    if record is not None:
        record.pids[daemon.record_key] = daemon.pid
        record.save()


def _kill_remains(daemon: Supervised, pid: int) -> None:
    """What the dead leader left in its group (an API server's scheduler and controller manager): gone
    before the new one starts its own. A leader this supervisor started is its child: reaped here."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    if not daemon.kill_group:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class _Watch:
    daemon: Supervised
    fd: int | None  # a pidfd of the running process; None while it waits to be started again
    started: float
    backoff: Backoff = field(default_factory=lambda: Backoff(BACKOFF_INITIAL, BACKOFF_MAX, jitter=0.0))
    due: float = 0.0  # when a dead daemon starts again


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None


class Supervisor:
    """Keeps the daemons in `<state>/supervised.json` running until SIGTERM."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.daemons = load(state_dir)
        self._stopping = False

    def stop(self, *_: object) -> None:
        self._stopping = True

    def run(self) -> None:
        now = time.monotonic()
        watches = [_Watch(d, _pidfd(d.pid) if d.pid else None, now) for d in self.daemons]
        for w in watches:
            if w.fd is None:
                w.due = now  # already dead when we began: start it now
        while not self._stopping:
            now = time.monotonic()
            for w in watches:
                if w.fd is None and now >= w.due:
                    self._start(w)
            fds = {w.fd: w for w in watches if w.fd is not None}
            waits = [w.due - now for w in watches if w.fd is None]
            timeout = max(0.0, min(waits)) if waits else 1.0
            try:
                ready, _, _ = select.select(list(fds), [], [], min(timeout, 1.0))
            except InterruptedError:
                continue
            for fd in ready:
                self._died(fds[fd])
        for w in watches:
            if w.fd is not None:
                os.close(w.fd)

    def _died(self, w: _Watch) -> None:
        assert w.fd is not None
        os.close(w.fd)
        w.fd = None
        daemon = w.daemon
        _kill_remains(daemon, daemon.pid)
        now = time.monotonic()
        if _requested(self.state_dir, daemon.name):
            w.backoff.reset()
            w.due = now
            log.info("restart asked for daemon=%s pid=%d", daemon.name, daemon.pid)
            return
        if now - w.started >= BACKOFF_RESET:
            w.backoff.reset()
        delay = w.backoff.next()
        w.due = now + delay
        log.warning("daemon died daemon=%s pid=%d restart_in=%.0fs", daemon.name, daemon.pid, delay)

    def _start(self, w: _Watch) -> None:
        daemon = w.daemon
        try:
            daemon.pid = spawn(daemon)
        except OSError as err:
            log.error("cannot start daemon=%s error=%r", daemon.name, str(err))
            w.due = time.monotonic() + w.backoff.next()
            return
        daemon.restarts += 1
        w.fd, w.started = _pidfd(daemon.pid), time.monotonic()
        log.info("daemon started daemon=%s pid=%d restarts=%d", daemon.name, daemon.pid, daemon.restarts)
        save(self.state_dir, self.daemons)
        _record_pid(daemon)


def wait_restarted(state_dir: Path, name: str, old_pid: int, timeout: float) -> int:
    """The daemon's new pid once the supervisor started it again (TimeoutError otherwise)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for daemon in load(state_dir):
            if daemon.name == name and daemon.pid and daemon.pid != old_pid and pid_alive(daemon.pid):
                return daemon.pid
        time.sleep(0.2)
    raise TimeoutError(f"{name} not started again within {timeout:.0f} s")


def start_supervisor(state_dir: Path, daemons: list[Supervised]) -> int:
    """Write supervised.json and start `pykubelet supervise` for it in a session of its own (it outlives
    the caller, as the daemons do); its pid is recorded in the stack record as "supervisor"."""
    import sys

    from pykubelet.rig.process import Daemon

    save(state_dir, daemons)
    argv = [sys.executable, "-m", "pykubelet", "supervise", "--state-dir", str(state_dir)]
    supervisor = Daemon("pykubelet supervise", argv, state_dir / SUPERVISOR_LOG)
    supervisor.start(lambda: True, timeout=10)
    assert supervisor.pid is not None
    record = StackRecord.load(state_dir)
    if record is not None:
        record.pids["supervisor"] = supervisor.pid
        record.save()
    return supervisor.pid
