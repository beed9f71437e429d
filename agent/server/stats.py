"""/stats/summary, /metrics/resource and /metrics/cadvisor of the kubelet API (upstream's
pkg/kubelet/server/stats and the metrics paths of server.go), each from one StatsProvider pass, and
/metrics, the kubelet's own registry (agent/metrics.py) with the claims' volume stats
(stats/volume_metrics.py). A failed pass is upstream's answer: a 500 with
"Internal Error: ..." for the Summary, resource_scrape_error 1 for the resource metrics, a 500 for
cadvisor's."""

from __future__ import annotations

import logging

from aiohttp import web

from agent.cri import CRIError
from agent.metrics import KubeletMetrics
from agent.stats import cadvisor_metrics, volume_metrics
from agent.stats.provider import StatsProvider
from agent.stats.resource_metrics import render
from agent.stats.summary import summary_json
from kubeclient import exposition
from kubeclient.exposition import CONTENT_TYPE

log = logging.getLogger("agent.server.stats")


def metrics_response(body: bytes) -> web.Response:
    resp = web.Response(body=body, headers={"X-Content-Type-Options": "nosniff"})
    resp.headers["Content-Type"] = CONTENT_TYPE
    return resp


class StatsHandlers:
    def __init__(self, provider: StatsProvider, kubelet: KubeletMetrics | None = None) -> None:
        self.provider = provider
        self.kubelet = kubelet

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/stats/summary", self.summary)
        app.router.add_get("/stats/summary/", self.summary)
        app.router.add_get("/metrics/resource", self.resource_metrics)
        app.router.add_get("/metrics/cadvisor", self.cadvisor)
        if self.kubelet is not None:
            app.router.add_get("/metrics", self.kubelet_metrics)

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

    async def cadvisor(self, request: web.Request) -> web.Response:
        try:
            summary = await self.provider.summary()
        except (CRIError, OSError) as err:
            log.warning("cadvisor metrics pass failed error=%r", str(err))
            return web.Response(status=500, text=f"Internal Error: {err}")
        return metrics_response(cadvisor_metrics.render(cadvisor_metrics.series_of(summary)))

    async def kubelet_metrics(self, request: web.Request) -> web.Response:
        assert self.kubelet is not None
        volumes = await self.provider.claim_volumes()
        return metrics_response(
            exposition.render([self.kubelet.registry, volume_metrics.registry_of(volumes)])
        )
