"""Serve one aiohttp application on a `host:port` address, the way every component's side endpoints
(health, readiness, metrics) are given: `--something-bind-address 0.0.0.0:8080`. Port 0 binds a free
port and reports it, so tests and several stacks on one host never collide."""

from __future__ import annotations

import ssl

from aiohttp import web


def split_address(address: str) -> tuple[str, int]:
    """'0.0.0.0:8080' -> ('0.0.0.0', 8080); ':8080' and '[::]:8080' too (an empty host is every address)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid address {address!r}: want host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


async def serve(
    app: web.Application, address: str, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (port 0: a free one); returns the runner (to clean up) and the bound port."""
    host, port = split_address(address)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
    return runner, (sockets[0].getsockname()[1] if sockets else port)
