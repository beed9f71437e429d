"""Upstream kubelet's plain-HTTP health endpoint (healthzPort, default 10248 on 127.0.0.1): what kubeadm
and systemd watchdogs poll, with no TLS and no authentication, unlike the kubelet API's /healthz.

Upstream installs the default checks only (`ping`): the server answers `ok` as long as the process
runs, from before the node registers (kubeadm polls it while the control plane's static pods start).
`?verbose` lists the checks; `/healthz/ping` answers alone; a failing check (none today, the seam is
kept for callers) answers 500 with upstream's `[-]NAME failed: reason withheld` lines. A port that cannot
be bound is retried every 5 s, as upstream's wait.Until around ListenAndServe does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger("agent.server.healthz")

HEADERS = {"X-Content-Type-Options": "nosniff"}
RETRY = 5.0


class HealthzServer:
    def __init__(self, checks: dict[str, Callable[[], str | None]] | None = None) -> None:
        self.checks: dict[str, Callable[[], str | None]] = {"ping": lambda: None, **(checks or {})}
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.all_checks)
        app.router.add_get("/healthz/{name}", self.one_check)
        return app

    async def all_checks(self, request: web.Request) -> web.Response:
        failed = False
        lines = []
        for name, check in self.checks.items():
            problem = check()
            if problem is not None:
                failed = True
                log.info("healthz check failed check=%s error=%r", name, problem)
                lines.append(f"[-]{name} failed: reason withheld")
            else:
                lines.append(f"[+]{name} ok")
        if failed:
            text = "\n".join(lines) + "\nhealthz check failed\n"
            return web.Response(status=500, text=text, headers=HEADERS)
        if "verbose" in request.query:
            return web.Response(text="\n".join(lines) + "\nhealthz check passed\n", headers=HEADERS)
        return web.Response(text="ok", headers=HEADERS)

    async def one_check(self, request: web.Request) -> web.Response:
        check = self.checks.get(request.match_info["name"])
        if check is None:
            return web.Response(status=404, text="404 page not found\n", headers=HEADERS)
        problem = check()
        if problem is not None:
            return web.Response(status=500, text=f"internal server error: {problem}\n", headers=HEADERS)
        return web.Response(text="ok", headers=HEADERS)

    async def serve(self, address: str, port: int) -> None:
        """Bind and serve; retried every 5 s while the port cannot be bound. Runs until cancelled."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        while True:
            site = web.TCPSite(self._runner, address, port)
            try:
                await site.start()
            except OSError as err:
                log.error("healthz server failed address=%s port=%d error=%r", address, port, str(err))
                await asyncio.sleep(RETRY)
                continue
            server = site._server  # the port actually bound (0: any)
            sockets = getattr(server, "sockets", None) or []
            self.port = sockets[0].getsockname()[1] if sockets else port
            log.info("serving healthz address=%s port=%d", address, self.port)
            return

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
