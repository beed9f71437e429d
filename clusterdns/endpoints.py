"""The DNS server's three HTTP endpoints, as a kubeadm Corefile enables them in CoreDNS: the health
plugin's /health (200 "OK" while the process serves; :8080), the ready plugin's /ready (200 "OK" once
the kubernetes plugin has synced its Services and EndpointSlices, 503 naming the plugins not yet ready
before; :8181) and the prometheus plugin's /metrics (:9153)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from clusterdns.metrics import DnsMetrics
from kubeclient.exposition import CONTENT_TYPE


def health_app() -> web.Application:
    async def health(_request: web.Request) -> web.Response:
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_get("/health", health)
    return app


def ready_app(not_ready: Callable[[], list[str]]) -> web.Application:
    """`not_ready` names the plugins still syncing; none: ready."""

    async def ready(_request: web.Request) -> web.Response:
        waiting = not_ready()
        if waiting:
            return web.Response(status=503, text=",".join(waiting))
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_get("/ready", ready)
    return app


def metrics_app(metrics: DnsMetrics) -> web.Application:
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app
