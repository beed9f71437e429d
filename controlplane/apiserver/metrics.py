"""The API server's request metrics with upstream's names, labels and buckets
(k8s.io/apiserver/pkg/endpoints/metrics): apiserver_request_total and apiserver_request_duration_seconds
per verb, dry_run, group, version, resource, subresource, scope and component (and code for the total),
and apiserver_longrunning_requests for the watches and connections open now.

The REST handler marks a resource request once it has been parsed and authorized (`mark`), so, as
upstream's instrumented routes, refusals by authentication and authorization are not counted; a
non-resource request is counted by its path when it was served (not 401, 403 or 404). A request's
cost is one dict write, two clock reads and two label lookups; the long-running gauge is counted from
the set of requests in flight when /metrics is scraped, so nothing is done per watch event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubeclient.exposition import render
from kubeclient.logsetup import V, kv

COMPONENT = "apiserver"
# upstream's httplog: one line per request at V(3), with the same keys
httplog = logging.getLogger("controlplane.apiserver.httplog")
HTTPLOG_LEVEL = V(3)
# The buckets upstream chose for the API call latency SLO (requestLatencies).
DURATION_BUCKETS = (
    0.005,
    0.025,
    0.05,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    1.25,
    1.5,
    2,
    3,
    4,
    5,
    6,
    8,
    10,
    15,
    20,
    30,
    45,
    60,
)
_LABELS = ["verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"]
_LONG_LABELS = ["verb", "group", "version", "resource", "subresource", "scope", "component"]
# The REST verbs as upstream's installer names its routes (what `verb` says in the metrics).
_REPORTED = {
    "get": "GET",
    "list": "LIST",
    "watch": "WATCH",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETECOLLECTION",
}
_UNCOUNTED = (401, 403, 404)


@dataclass(frozen=True, slots=True)
class RequestLabels:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    scope: str
    long_running: bool


INFO_KEY = web.RequestKey("metrics_request_labels", RequestLabels)


def scope_of(namespace: str, name: str) -> str:
    """upstream's CleanScope for a resource request."""
    return "namespace" if namespace else "resource" if name else "cluster"


def mark(
    request: web.Request,
    verb: str,
    group: str,
    version: str,
    resource: str,
    subresource: str,
    namespace: str,
    name: str,
    connects: bool,
) -> None:
    """Called by the REST handler once a resource request is parsed and authorized."""
    if connects:
        reported = "CONNECT"
    elif verb == "patch" and (request.headers.get("Content-Type") or "").startswith(
        "application/apply-patch"
    ):
        reported = "APPLY"
    else:
        reported = _REPORTED.get(verb, "other")
    follow = subresource == "log" and request.query.get("follow") in ("true", "1")
    request[INFO_KEY] = RequestLabels(
        reported,
        group,
        version,
        resource,
        subresource,
        scope_of(namespace, name),
        reported in ("WATCH", "CONNECT") or follow,
    )


def dry_run_of(request: web.Request) -> str:
    """upstream's cleanDryRun: the dryRun values, sorted and comma-joined ("" for none)."""
    values = request.query.getall("dryRun", [])
    return ",".join(sorted(set(values))) if values else ""


class _LongRunning(Collector):
    def __init__(self, inflight: dict[int, web.Request]) -> None:
        self.inflight = inflight
        self.seen: set[tuple[str, ...]] = set()  # a label set once open stays, at 0, as a gauge vec's child

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "apiserver_longrunning_requests",
            "[ALPHA] Gauge of all active long-running apiserver requests broken out by verb, group, version, "
            "resource, scope and component. Not all requests are tracked this way.",
            labels=_LONG_LABELS,
        )
        counts: dict[tuple[str, ...], int] = {}
        for request in list(self.inflight.values()):
            info = request.get(INFO_KEY)
            if info is not None and info.long_running:
                key = (
                    info.verb,
                    info.group,
                    info.version,
                    info.resource,
                    info.subresource,
                    info.scope,
                    COMPONENT,
                )
                counts[key] = counts.get(key, 0) + 1
        self.seen |= counts.keys()
        for key in sorted(self.seen):
            family.add_metric(list(key), counts.get(key, 0))
        yield family


class _Gauges(Collector):
    """Gauges computed at scrape time from the server's state (storage objects, watchers)."""

    def __init__(self, source: Callable[[], list[Metric]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from self.source()


class ApiServerMetrics:
    def __init__(self, state: Callable[[], list[Metric]] = list) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "apiserver_request_total",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, "
            "resource, scope, component, and HTTP response code.",
            [*_LABELS, "code"],
            registry=r,
        )
        self.durations = Histogram(
            "apiserver_request_duration_seconds",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, "
            "resource, subresource, scope and component.",
            _LABELS,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self._children: dict[tuple[tuple[str, ...], int], tuple[Any, Any]] = {}
        self.inflight: dict[int, web.Request] = {}  # id -> request (requests are unhashable)
        r.register(_LongRunning(self.inflight))
        r.register(_Gauges(state))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.perf_counter()
        self.inflight[id(request)] = request
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self.inflight.pop(id(request), None)
            self._record(request, status, time.perf_counter() - started)
            if httplog.isEnabledFor(HTTPLOG_LEVEL):
                _log_request(request, status, time.perf_counter() - started)

    def _record(self, request: web.Request, status: int, seconds: float) -> None:
        info = request.get(INFO_KEY)
        if info is not None:
            labels = (
                info.verb,
                dry_run_of(request),
                info.group,
                info.version,
                info.resource,
                info.subresource,
                info.scope,
                COMPONENT,
            )
        elif status not in _UNCOUNTED and (
            not request.path.startswith(("/api/", "/apis/")) or _is_discovery(request.path)
        ):
            verb = "GET" if request.method in ("GET", "HEAD") else request.method
            labels = (verb, "", "", "", "", request.path, "", COMPONENT)
        else:
            return
        key = (labels, status)
        children = self._children.get(key)
        if children is None:  # prometheus_client's labels() is the costly part: once per label set
            children = self._children[key] = (
                self.requests.labels(*labels, str(status)),
                self.durations.labels(*labels),
            )
        children[0].inc()
        children[1].observe(seconds)

    def exposition(self) -> bytes:
        return render([self.registry])


def _is_discovery(path: str) -> bool:
    """/api, /apis, /api/v1, /apis/{group}, /apis/{group}/{version}: served without a resource."""
    parts = [p for p in path.split("/") if p]
    return (parts[:1] == ["api"] and len(parts) <= 2) or (parts[:1] == ["apis"] and len(parts) <= 3)


def storage_gauges(object_counts: dict[str, int], watchers: int) -> list[Metric]:
    """apiserver_storage_objects per resource (upstream's `plural.group`), and the registered watchers."""
    objects = GaugeMetricFamily(
        "apiserver_storage_objects",
        "[STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching "
        "error, the value will be -1.",
        labels=["resource"],
    )
    for resource, count in sorted(object_counts.items()):
        objects.add_metric([resource], count)
    registered = GaugeMetricFamily(
        "apiserver_registered_watchers", "Number of currently registered watchers.", value=watchers
    )
    return [objects, registered]


def _log_request(request: web.Request, status: int, seconds: float) -> None:
    """The request as upstream's httplog writes it (no header, so no credential, is logged)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    httplog.log(
        HTTPLOG_LEVEL,
        "HTTP",
        extra=kv(
            verb=request.method,
            URI=request.path_qs,
            latency=f"{seconds * 1000:.3f}ms",
            userAgent=request.headers.get("User-Agent", ""),
            srcIP=f"{peer[0]}:{peer[1]}" if peer else "",
            resp=status,
        ),
    )
