"""/stats/summary and /metrics/resource of the kubelet API (upstream's pkg/kubelet/server/stats and
/metrics/resource in server.go), both from one StatsProvider pass; a failed pass is upstream's answer:
a 500 with "Internal Error: ..." for the Summary, resource_scrape_error 1 for the metrics."""

from __future__ import annotations

import logging

from aiohttp import web

from agent.cri import CRIError
from agent.stats.provider import StatsProvider
from agent.stats.resource_metrics import render
from agent.stats.summary import summary_json

log = logging.getLogger("agent.server.stats")

# The text format upstream's component-base serves when the scraper asks for nothing else.
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


def metrics_response(body: bytes) -> web.Response:
    resp = web.Response(body=body, headers={"X-Content-Type-Options": "nosniff"})
    resp.headers["Content-Type"] = TEXT_FORMAT
    return resp


class StatsHandlers:
    def __init__(self, provider: StatsProvider) -> None:
        self.provider = provider

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/stats/summary", self.summary)
        app.router.add_get("/stats/summary/", self.summary)
        app.router.add_get("/metrics/resource", self.resource_metrics)

    async def summary(self, request: web.Request) -> web.Response:
        # upstream: only the exact value "true" asks for the CPU and memory subset.
        only = request.query.getall("only_cpu_and_memory", []) == ["true"]
        try:
            summary = await self.provider.summary(only_cpu_and_memory=only)
        except (CRIError, OSError) as err:
            log.warning("stats summary failed error=%r", str(err))
            return web.Response(status=500, text=f"Internal Error: failed to get node info: {err}")
        return web.json_response(summary_json(summary, only))

    async def resource_metrics(self, request: web.Request) -> web.Response:
        try:
            summary = await self.provider.summary(only_cpu_and_memory=True)
        except (CRIError, OSError) as err:
            log.warning("resource metrics pass failed error=%r", str(err))
            summary = None
        return metrics_response(render(summary))
