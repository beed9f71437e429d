"""The nginx process the controller owns: started in the foreground as its child (`daemon off`, so it
stops with the controller and `pykubelet down` finds it by its state dir), a configuration checked with
`nginx -t` before it is taken, applied with `nginx -s reload` (the master starts workers on the new
configuration and lets the old ones finish their requests: no connection is dropped), stopped with
SIGQUIT (graceful) then SIGKILL."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger("ingresscontroller.nginx")


class NginxError(Exception):
    pass


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
        """Take `text` as the configuration: checked, then (re)started or reloaded; NginxError when
        nginx refuses it (the running configuration then stays)."""
        candidate = self.root / "nginx.conf.next"
        candidate.write_text(text)
        why = await self.test(candidate)
        if why is not None:
            raise NginxError(why)
        os.replace(candidate, self.conf)
        if not self.running:
            await self._start()
            return
        code, out = await self._run(*self._argv(self.conf), "-s", "reload")
        if code != 0:
            raise NginxError(f"nginx -s reload: {out.strip()}")
        self.reloads += 1

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
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv(self.conf),
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        pid_file = self.root / "nginx.pid"
        for _ in range(100):  # the master writes its pid once it listens: up to 10 s
            if self.proc.returncode is not None:
                raise NginxError(
                    f"nginx exited at start ({self.proc.returncode}): see {self.root / 'error.log'}"
                )
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
        except TimeoutError:
            proc.kill()
            await proc.wait()
        log.info("nginx stopped")


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
