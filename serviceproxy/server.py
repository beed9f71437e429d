"""The proxy's two plain-HTTP endpoints, as kube-proxy serves them: /healthz and /livez on the healthz
address (0.0.0.0:10256; 503 once a queued change has gone unsynced for twice the sync period) and
/metrics on the metrics address (127.0.0.1:10249)."""

from __future__ import annotations

import json
import time

from aiohttp import web

from kubeclient.exposition import CONTENT_TYPE, render
from serviceproxy.metrics import ProxyMetrics
from serviceproxy.proxier import Health


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when)) + f".{int(when % 1 * 1e9):09d} +0000 UTC"


def healthz_app(health: Health) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        now = time.time()
        body = {"lastUpdated": _stamp(health.last_updated), "currentTime": _stamp(now)}
        if request.path == "/healthz":
            body["nodeEligible"] = True
        ok = health.healthy(now)
        return web.Response(status=200 if ok else 503, text=json.dumps(body), content_type="application/json")

    app = web.Application()
    app.router.add_get("/healthz", handle)
    app.router.add_get("/livez", handle)
    return app


def metrics_app(metrics: ProxyMetrics) -> web.Application:
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=render([metrics.registry]), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    return app
