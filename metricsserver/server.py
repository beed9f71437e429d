"""The metrics server's loop and its HTTPS API: informers on nodes and pods (the objects metrics are
served for, with their labels), a scrape round every --metric-resolution into the store, and the
metrics.k8s.io/v1beta1 endpoints (list and get of nodes and pods, label and field selectors), each
request authenticated and authorized first (auth.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from aiohttp import web

from kubeclient.client import KubeClient
from kubeclient.delegatedauth import DelegatedAuth, Request, path_request, status
from kubeclient.exposition import CONTENT_TYPE
from kubeclient.informer import Informer
from kubeclient.selectors import SelectorError, parse_fields, parse_labels
from metricsserver import openapi, shapes
from metricsserver.scraper import Scraper
from metricsserver.storage import MetricsStore

log = logging.getLogger("metricsserver")
Obj = dict[str, Any]
PREFIX = f"/apis/{shapes.API_VERSION}"


def _json(obj: Obj) -> web.Response:
    return web.Response(body=json.dumps(obj), content_type="application/json")


class MetricsServer:
    def __init__(
        self,
        client: KubeClient,
        scraper: Scraper,
        auth: DelegatedAuth,
        resolution: float = 15.0,
    ) -> None:
        self.client = client
        self.scraper = scraper
        self.auth = auth
        self.resolution = resolution
        self.store = MetricsStore()
        self.metrics = scraper.metrics
        self.metrics.points = self.store.point_counts
        self.nodes = Informer(client, "/api/v1/nodes")
        self.pods = Informer(client, "/api/v1/pods")
        self.rounds = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for informer in (self.nodes, self.pods):
            self._tasks.append(asyncio.create_task(informer.run()))
        await asyncio.gather(self.nodes.synced.wait(), self.pods.synced.wait())
        self._tasks.append(asyncio.create_task(self._scrape_loop(), name="scrape"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.scraper.close()

    async def _scrape_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await self.scrape_once()
            await asyncio.sleep(max(0.0, self.resolution - (loop.time() - began)))

    async def scrape_once(self) -> None:
        began = time.monotonic()
        samples = await self.scraper.scrape(self.nodes.list())
        self.store.store(samples)
        self.metrics.tick_duration.observe(time.monotonic() - began)
        self.rounds += 1
        log.debug("event=scraped nodes=%d round=%d", len(samples), self.rounds)

    # --- HTTP ---------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.auth.middleware(self._request_of)])
        r = app.router
        for path in ("/healthz", "/livez"):
            r.add_get(path, self._ok)
        r.add_get("/readyz", self._ready)
        r.add_get("/metrics", self._metrics)
        r.add_get("/apis", lambda _: self._doc(shapes.api_group_list()))
        r.add_get(f"/apis/{shapes.GROUP}", lambda _: self._doc(shapes.api_group()))
        r.add_get(PREFIX, lambda _: self._doc(shapes.resource_list()))
        v3_doc = openapi.v3_group_version()
        r.add_get("/openapi/v2", lambda _: self._doc(openapi.v2()))
        r.add_get("/openapi/v3", lambda _: self._doc(openapi.v3_root(v3_doc)))
        r.add_get(f"/openapi/v3/{openapi.GV_PATH}", lambda _: self._doc(v3_doc))
        r.add_get(f"{PREFIX}/nodes", self._list_nodes)
        r.add_get(f"{PREFIX}/nodes/{{name}}", self._get_node)
        r.add_get(f"{PREFIX}/pods", self._list_pods)
        r.add_get(f"{PREFIX}/namespaces/{{namespace}}/pods", self._list_pods)
        r.add_get(f"{PREFIX}/namespaces/{{namespace}}/pods/{{name}}", self._get_pod)
        return app

    @staticmethod
    def _request_of(request: web.Request) -> Request:
        path = request.path
        if not path.startswith(PREFIX + "/"):
            return path_request(request)
        verb = {"GET": "get", "HEAD": "get"}.get(request.method, request.method.lower())
        parts = [p for p in path[len(PREFIX) + 1 :].split("/") if p]
        namespace = ""
        if len(parts) >= 3 and parts[0] == "namespaces":
            namespace, parts = parts[1], parts[2:]
        resource = parts[0] if parts else ""
        name = parts[1] if len(parts) > 1 else ""
        if not name and verb == "get":
            verb = "list"
        return Request(verb, path, resource, namespace, name, shapes.GROUP, shapes.VERSION)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    async def _ready(self, request: web.Request) -> web.Response:
        if self.rounds == 0:
            return web.Response(
                status=500, text="[-]metric-storage-ready failed: not metrics to serve\nreadyz check failed"
            )
        return web.Response(text="ok")

    async def _doc(self, doc: Obj) -> web.Response:
        return _json(doc)

    @staticmethod
    def _selectors(request: web.Request) -> tuple[Any, list[Any]] | web.Response:
        try:
            labels = parse_labels(request.query.get("labelSelector", ""))
            fields = parse_fields(request.query.get("fieldSelector", ""))
        except (SelectorError, ValueError) as err:
            return status(400, "BadRequest", str(err))
        for req in fields:
            if req.field not in ("metadata.name", "metadata.namespace"):
                return status(
                    400,
                    "BadRequest",
                    f'"{req.field}" is not a known field selector: only "metadata.name", "metadata.namespace"',
                )
        return labels, fields

    @staticmethod
    def _fields_match(obj: Obj, fields: list[Any]) -> bool:
        meta = obj.get("metadata") or {}
        for req in fields:
            value = meta.get(req.field.split(".", 1)[1], "")
            if (value == req.value) != req.equal:
                return False
        return True

    async def _list_nodes(self, request: web.Request) -> web.Response:
        selected = self._selectors(request)
        if isinstance(selected, web.Response):
            return selected
        labels, fields = selected
        items = []
        for node in sorted(self.nodes.list(), key=lambda n: n["metadata"]["name"]):
            if not labels.matches(node["metadata"].get("labels")) or not self._fields_match(node, fields):
                continue
            usage = self.store.node(node["metadata"]["name"])
            if usage is not None:
                items.append(shapes.node_metrics(node, usage))
        return _json(shapes.metrics_list("NodeMetrics", items))

    async def _get_node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        node = self.nodes.get(name)
        usage = self.store.node(name) if node is not None else None
        if node is None or usage is None:
            return status(
                404,
                "NotFound",
                f'nodemetrics.metrics.k8s.io "{name}" not found',
                {"name": name, "group": shapes.GROUP, "kind": "nodemetrics"},
            )
        return _json(shapes.node_metrics(node, usage))

    async def _list_pods(self, request: web.Request) -> web.Response:
        selected = self._selectors(request)
        if isinstance(selected, web.Response):
            return selected
        labels, fields = selected
        namespace = request.match_info.get("namespace", "")
        usage = self.store.pods()
        items = []
        for pod in sorted(
            self.pods.list(), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
        ):
            meta = pod["metadata"]
            if namespace and meta.get("namespace") != namespace:
                continue
            if not labels.matches(meta.get("labels")) or not self._fields_match(pod, fields):
                continue
            containers = usage.get((meta.get("namespace", ""), meta.get("name", "")))
            if containers:
                items.append(shapes.pod_metrics(pod, containers))
        return _json(shapes.metrics_list("PodMetrics", items))

    async def _get_pod(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        pod = self.pods.get(f"{namespace}/{name}")
        containers = self.store.pods().get((namespace, name)) if pod is not None else None
        if pod is None or not containers:
            return status(
                404,
                "NotFound",
                f'podmetrics.metrics.k8s.io "{namespace}/{name}" not found',
                {"name": name, "group": shapes.GROUP, "kind": "podmetrics"},
            )
        return _json(shapes.pod_metrics(pod, containers))
