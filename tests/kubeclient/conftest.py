"""A throwaway HTTP server for the client library's unit tests: one handler answers every path."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from kubeclient.client import KubeClient
from kubeclient.config import ClusterConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@contextlib.asynccontextmanager
async def served(handler: Handler, **client_options: object) -> AsyncIterator[KubeClient]:
    """A KubeClient talking plain HTTP to `handler` on a free local port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    token = client_options.pop("token", None)
    client = KubeClient(ClusterConfig(server=f"http://127.0.0.1:{port}", token=token), **client_options)  # type: ignore[arg-type]
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()
