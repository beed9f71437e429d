"""The nginx process the controller owns: started in the foreground as its child (`daemon off`, so it
stops with the controller and `pykubelet down` finds it by its state dir), stopped with SIGQUIT
(graceful) then, after the grace, SIGKILL to its process group (the workers with the master).

The first configuration is checked with `nginx -t` before the master starts on it. A later one is
applied by SIGHUP to the master alone (it starts workers on the new configuration and lets the old ones
finish their requests: no connection is dropped): the master refuses a bad configuration itself and
keeps its workers, so a separate `nginx -t` would only parse the whole configuration once more (at
2 000 server blocks each parse is most of a change's cost), and so would `nginx -s reload`, which reads
the configuration again just to find the pid. The outcome is read from the error log as the master
writes it (inotify, bounded): its new workers started, or the `[emerg]` that kept the old ones; a
refused file is replaced by the one still running, so a restart takes that.

A port another process took after the controller's check fails nginx's `bind()` (or `listen()`): the
master retries for 2.5 s, then refuses the whole configuration (a reload) or exits (a start). Its
complaints name each address:port, and `PortsTaken` hands them on (the controller then leaves those
listeners out and applies the rest at once); a reload's outcome is read up to the master's last word on
it ("still could not bind()"), so the next reload's outcome is never this one's."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import signal
from pathlib import Path
from typing import BinaryIO

from asyncinotify import Inotify, Mask

log = logging.getLogger("ingresscontroller.nginx")


RELOAD_TIMEOUT = 60.0  # seconds for the master to parse a configuration and start its workers


# nginx's complaint when it cannot listen: "bind() to 127.0.0.1:8080 failed (98: Address already in use)",
# or "listen() to 127.0.0.1:8080, backlog 511 failed (98: ...)".
_LISTEN_FAILED = re.compile(r"(?:bind|listen)\(\) to (\S+):(\d+)(?:,| failed).*\((\d+): ")


class NginxError(Exception):
    pass


class PortsTaken(NginxError):
    """nginx could not listen on these ports (port -> its complaint), so it refused the configuration."""

    def __init__(self, ports: dict[int, str]) -> None:
        super().__init__("; ".join(ports.values()))
        self.ports = ports


def listen_failure(complaint: str) -> tuple[int, bool] | None:
    """The port of a complaint saying nginx could not listen there, and whether the port was in use
    (EADDRINUSE, which nginx retries for 2.5 s); None for any other complaint."""
    found = _LISTEN_FAILED.search(complaint)
    if found is None:
        return None
    return int(found.group(2)), int(found.group(3)) == errno.EADDRINUSE


def _complaint(line: str) -> str:
    """An error-log line's message: "2026/01/01 00:00:00 [emerg] 12#12: bind() to ..." -> "bind() to ..."."""
    return line.split("] ", 1)[-1].split(": ", 1)[-1]


class Nginx:
    def __init__(self, root: Path, binary: str = "nginx") -> None:
        self.root = root
        self.binary = binary
        self.conf = root / "nginx.conf"
        self.proc: asyncio.subprocess.Process | None = None
        self.reloads = 0

    def _argv(self, conf: Path) -> list[str]:
        return [self.binary, "-c", str(conf), "-p", str(self.root), "-e", str(self.root / "error.log")]

    async def _run(self, *args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=self.root, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode(errors="replace")

    async def test(self, conf: Path) -> str | None:
        """None when nginx accepts the configuration at `conf`, else its complaint."""
        code, out = await self._run(*self._argv(conf), "-t", "-q")
        if code == 0:
            return None
        lines = [line for line in out.splitlines() if "[emerg]" in line or "[crit]" in line]
        return (lines[0] if lines else out.strip()).split("] ", 1)[-1]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def apply(self, text: str) -> None:
        """Take `text` as the configuration: a running master reloads it, else one starts on it once
        `nginx -t` passed; NginxError when nginx refuses it (the running configuration then stays)."""
        if not self.running:
            candidate = self.root / "nginx.conf.next"
            candidate.write_text(text)
            why = await self.test(candidate)
            if why is not None:
                raise NginxError(why)
            os.replace(candidate, self.conf)
            await self._start()
            return
        previous = self.conf.read_bytes() if self.conf.exists() else b""
        _write(self.conf, text.encode())
        try:
            await self._reload()
        except NginxError:
            _write(self.conf, previous)  # what the workers run is what a restart starts on
            raise
        self.reloads += 1

    async def _reload(self) -> None:
        """SIGHUP to the master, then its answer from the error log."""
        assert self.proc is not None
        error_log = self.root / "error.log"
        error_log.touch()
        with Inotify() as inotify, error_log.open("rb") as lines:
            inotify.add_watch(error_log, Mask.MODIFY)
            lines.seek(0, os.SEEK_END)
            self.proc.send_signal(signal.SIGHUP)
            try:
                why, taken = await asyncio.wait_for(_reload_outcome(lines, inotify), RELOAD_TIMEOUT)
            except TimeoutError:
                why, taken = f"the master did not answer the reload within {RELOAD_TIMEOUT:.0f} s", {}
        if taken:
            raise PortsTaken(taken)
        if why:
            raise NginxError(why)

    async def _stop_leftover(self) -> None:
        """An nginx of an earlier run of this controller (killed on its own: its nginx lived on) holds the
        ports: it is stopped first, known by its pid file and a command line naming this configuration."""
        pid = leftover_master(self.root / "nginx.pid", self.conf)
        if pid is None:
            return
        log.info("stopping the nginx an earlier run left pid=%d", pid)
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):  # up to 10 s for it to exit
            if not _alive(pid):
                return
            await asyncio.sleep(0.1)

    async def _start(self) -> None:
        await self._stop_leftover()
        error_log = self.root / "error.log"
        logged = error_log.stat().st_size if error_log.exists() else 0  # what this start adds is read
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv(self.conf),
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the master and its workers, killed together
        )
        pid_file = self.root / "nginx.pid"
        for _ in range(100):  # the master writes its pid once it listens: up to 10 s
            if self.proc.returncode is not None:
                taken = _taken(_lines_from(error_log, logged))
                if taken:
                    raise PortsTaken(taken)
                raise NginxError(f"nginx exited at start ({self.proc.returncode}): see {error_log}")
            if pid_file.exists() and pid_file.read_text().strip() == str(self.proc.pid):
                log.info("nginx started pid=%d", self.proc.pid)
                return
            await asyncio.sleep(0.1)
        raise NginxError("nginx did not write its pid file within 10 s")

    async def stop(self, grace: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        proc.send_signal(signal.SIGQUIT)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:  # the workers too: a master killed alone leaves them serving on
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        log.info("nginx stopped")


async def _reload_outcome(lines: BinaryIO, inotify: Inotify) -> tuple[str, dict[int, str]]:
    """("", {}) when the master's new workers started, else the complaint that kept the old ones and the
    ports it could not listen on (port -> complaint). A port in use is retried by the master for 2.5 s
    and ends with "still could not bind()": read up to there."""
    pending = b""
    taken: dict[int, str] = {}
    while True:
        pending += lines.read()
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            if "start worker process " in line and not taken:
                return "", {}
            if "[emerg]" not in line:
                continue
            why = _complaint(line)
            failed = listen_failure(why)
            if failed is not None:
                taken[failed[0]] = why
                if failed[1]:
                    continue  # in use: the master tries again, then says it still could not bind()
            return why, taken
        await inotify.get()


def _lines_from(path: Path, offset: int) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def _taken(lines: list[str]) -> dict[int, str]:
    """The ports nginx said it could not listen on (port -> its complaint), from error-log lines."""
    taken: dict[int, str] = {}
    for line in lines:
        if "[emerg]" in line and (failed := listen_failure(why := _complaint(line))) is not None:
            taken[failed[0]] = why
    return taken


def _write(path: Path, data: bytes) -> None:
    """`data` into `path` by rename, so the master never reads half a file."""
    tmp = path.with_name(path.name + ".next")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def leftover_master(pid_file: Path, conf: Path) -> int | None:
    """The pid of a running nginx master started on `conf`, from its pid file."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError):
        return None
    return pid if str(conf) in cmdline else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
