"""HTTP handlers of the kubelet API: /healthz, /pods, /containerLogs/{ns}/{pod}/{container}, and
/exec, /attach, /portForward and /run, proxied to the runtime's streaming server (agent/server/streaming.py).

Every request, /healthz included, is authenticated and authorized first (agent/server/auth.py: client
certificates, bearer tokens through TokenReview, anonymous only when enabled; AlwaysAllow or Webhook
with SubjectAccessReview), with upstream's answers: 401 "Unauthorized", 403 "Forbidden (user=...,
verb=..., resource=nodes, subresource=...)". Logs are read from the CRI log file of the container (or,
with previous=true, of its last terminated instance) and streamed by agent/server/logs.py.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aiohttp import web

from agent.cri import CRIClient, CRIError, pb
from agent.metrics import KubeletMetrics
from agent.pods import labels as L
from agent.server.auth import KubeletAuth, request_attributes
from agent.server.logs import LogOptions, LogOptionsError, stream_log
from agent.server.stats import StatsHandlers, metrics_response
from agent.server.streaming import StreamingHandlers
from agent.stats.provider import StatsProvider
from kubeclient.errors import ApiError

log = logging.getLogger("agent.server")

PodLookup = Callable[[str, str], dict[str, Any] | None]
PodList = Callable[[], list[dict[str, Any]]]


def _status_body(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": reason,
            "message": message,
            "code": code,
        },
        status=code,
    )


class KubeletServer:
    def __init__(
        self,
        cri: CRIClient,
        lookup: PodLookup,
        pods: PodList,
        *,
        auth: KubeletAuth,
        ssl_context: ssl.SSLContext | None = None,
        probe_metrics: Callable[[], bytes] | None = None,
        stats: StatsProvider | None = None,
        metrics: KubeletMetrics | None = None,
    ) -> None:
        self.cri = cri
        self.stats = stats
        self.metrics = metrics
        self.probe_metrics = probe_metrics
        self.lookup = lookup
        self.pods = pods
        self.auth = auth
        self.ssl_context = ssl_context
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth])
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/pods", self.list_pods)
        app.router.add_get("/pods/", self.list_pods)
        app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", self.container_logs)
        StreamingHandlers(self.cri, self.lookup).routes(app)
        app.router.add_get("/metrics/probes", self.metrics_probes)
        if self.stats is not None:
            StatsHandlers(self.stats, self.metrics).routes(app)
        return app

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=self.ssl_context)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info(
            "kubelet server listening address=%s port=%d tls=%s",
            host,
            self.port,
            self.ssl_context is not None,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        user = await self.auth.authenticate(request)
        if user is None:
            return web.Response(status=401, text="Unauthorized")
        attrs = request_attributes(user, request.method, request.path, self.auth.node)
        what = f"user={user.name}, verb={attrs.verb}, resource=nodes, subresource={attrs.subresource}"
        try:
            allowed = await self.auth.authorize(attrs)
        except ApiError as err:
            log.warning(
                "kubelet api authorization error user=%s verb=%s subresource=%s error=%r",
                user.name,
                attrs.verb,
                attrs.subresource,
                str(err),
            )
            return web.Response(status=500, text=f"Authorization error ({what})")
        if not allowed:
            log.info(
                "kubelet api forbidden user=%s verb=%s subresource=%s",
                user.name,
                attrs.verb,
                attrs.subresource,
            )
            return web.Response(status=403, text=f"Forbidden ({what})")
        log.debug("kubelet api request user=%s path=%s", user.name, request.path)
        return await handler(request)

    async def healthz(self, request: web.Request) -> web.Response:
        try:
            await self.cri.status()
        except CRIError as err:
            return web.Response(status=500, text=f"[-]runtime failed: {err}\nhealthz check failed\n")
        return web.Response(text="ok")

    async def metrics_probes(self, request: web.Request) -> web.Response:
        """Probe counts and durations in Prometheus text format, at upstream's path."""
        return metrics_response(self.probe_metrics() if self.probe_metrics is not None else b"")

    async def list_pods(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.pods()}
        )

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        ns, name, cname = (
            request.match_info["namespace"],
            request.match_info["pod"],
            request.match_info["container"],
        )
        pod = self.lookup(ns, name)
        if pod is None:
            return _status_body(404, "NotFound", f'pods "{name}" not found')
        previous = request.query.get("previous") in ("true", "1")
        try:
            opts = LogOptions.from_query(request.query)
        except LogOptionsError as err:
            return _status_body(err.code, "BadRequest" if err.code == 400 else "Invalid", str(err))
        try:
            path, running_id = await self._log_path(pod, cname, previous)
        except LookupError as err:
            return _status_body(400, "BadRequest", str(err))
        if previous:
            opts = replace(opts, follow=False)
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        await stream_log(resp, path, opts, lambda: self._still_running(running_id))
        return resp

    async def _log_path(self, pod: dict[str, Any], cname: str, previous: bool) -> tuple[str, str]:
        uid = pod["metadata"]["uid"]
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        names += [c["name"] for c in (pod.get("spec") or {}).get("initContainers") or []]
        names += [c["name"] for c in (pod.get("spec") or {}).get("ephemeralContainers") or []]
        if cname not in names:
            raise LookupError(f"container {cname} is not valid for pod {pod['metadata']['name']}")
        found = await self.cri.list_containers(labels={L.POD_UID: uid, L.CONTAINER_NAME: cname})
        found.sort(
            key=lambda c: (int(c.annotations.get(L.RESTART_COUNT, "0") or 0), c.created_at), reverse=True
        )
        index = 1 if previous else 0
        if len(found) <= index:
            if previous:
                raise LookupError(
                    f'previous terminated container "{cname}" in pod "{pod["metadata"]["name"]}" not found'
                )
            raise LookupError(f'container "{cname}" in pod "{pod["metadata"]["name"]}" is waiting to start')
        chosen = found[index]
        status = (await self.cri.container_status(chosen.id)).status
        return status.log_path, chosen.id if chosen.state == pb.CONTAINER_RUNNING else ""

    async def _still_running(self, container_id: str) -> bool:
        if not container_id:
            return False
        try:
            return (await self.cri.container_status(container_id)).status.state == pb.CONTAINER_RUNNING
        except CRIError:
            return False
