"""The API server's request metrics with upstream's names, labels and buckets
(k8s.io/apiserver/pkg/endpoints/metrics): apiserver_request_total and apiserver_request_duration_seconds
per verb, dry_run, group, version, resource, subresource, scope and component (and code for the total),
apiserver_request_sli_duration_seconds (the same labels but dry_run: the duration less the admission
webhooks' and the priority-and-fairness queue's time, which `latencytrackers` keeps; what the API call
latency SLO and ClusterLoader2 judge), apiserver_response_sizes of reads (GET, LIST),
apiserver_longrunning_requests for the watches and connections open now,
apiserver_current_inflight_requests (the most requests of each kind, readOnly or mutating, in flight at
once within the last second, long-running ones aside), apiserver_watch_events_total and
apiserver_watch_events_sizes per group, version and kind, and the process_* family (prometheus_client's
process collector). /metrics also shows admissionmetrics' histograms, storemetrics' etcd latencies and
flowcontrol's.

The REST handler marks a resource request once it has been parsed and authorized (`mark`), so, as
upstream's instrumented routes, refusals by authentication and authorization are not counted; a
non-resource request is counted by its path when it was served (not 401, 403 or 404). A request's
cost is one dict write, two clock reads, a context variable set and reset, and two label lookups; the long-running gauge is counted from
the set of requests in flight when /metrics is scraped, so nothing is done per watch event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controlplane.apiserver import admissionmetrics, latencytrackers
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
# requestSliLatencies' buckets: the duration's without 5 ms and 25 ms.
SLI_BUCKETS = DURATION_BUCKETS[2:]
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
# upstream's responseSizes buckets: 1 KB to 1 GB, by tens
SIZE_BUCKETS = tuple(1000.0 * 10**i for i in range(7))
# upstream's WatchEventsSizes buckets: 1 KiB to 128 KiB, doubling
WATCH_SIZE_BUCKETS = tuple(1024.0 * 2**i for i in range(8))
_SIZE_LABELS = ["verb", "group", "version", "resource", "subresource", "scope", "component"]
_READ_ONLY_METHODS = ("GET", "HEAD", "OPTIONS")


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


def scope_of(namespace: str, name: str, verb: str) -> str:
    """upstream's CleanScope for a resource request: a call naming one object, or creating one, is of
    `resource` scope (the SLO's single-object calls), else of its namespace's, else of the cluster's."""
    if name or verb == "create":
        return "resource"
    return "namespace" if namespace else "cluster"


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
        scope_of(namespace, name, verb),
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


@dataclass
class _Watermark:
    """Requests in flight per kind and the most seen at once within the current and the last second
    (upstream's watermark, reported as the last second's maximum)."""

    now: dict[str, int] = field(default_factory=lambda: {"mutating": 0, "readOnly": 0})
    high: dict[str, int] = field(default_factory=lambda: {"mutating": 0, "readOnly": 0})
    last: dict[str, int] = field(default_factory=lambda: {"mutating": 0, "readOnly": 0})
    window: float = 0.0

    def _roll(self) -> None:
        second = float(int(time.monotonic()))
        if second != self.window:
            self.last = self.high if second - self.window <= 1 else dict(self.now)
            self.high, self.window = dict(self.now), second

    def enter(self, kind: str) -> None:
        self._roll()
        self.now[kind] += 1
        self.high[kind] = max(self.high[kind], self.now[kind])

    def leave(self, kind: str) -> None:
        self._roll()
        self.now[kind] -= 1

    def collect(self) -> Metric:
        self._roll()
        family = GaugeMetricFamily(
            "apiserver_current_inflight_requests",
            "[STABLE] Maximal number of currently used inflight request limit of this apiserver per request "
            "kind in last second.",
            labels=["request_kind"],
        )
        for kind in ("mutating", "readOnly"):
            family.add_metric([kind], max(self.last[kind], self.high[kind]))
        return family


def _inflight_kind(request: web.Request) -> str | None:
    """readOnly or mutating, None for a long-running request (a watch), which upstream does not count."""
    if request.query_string and request.query.get("watch", "").lower() not in ("", "0", "false"):
        return None
    if "/watch/" in request.path:
        return None
    return "readOnly" if request.method in _READ_ONLY_METHODS else "mutating"


class _Gauges(Collector):
    """Gauges computed at scrape time from the server's state (storage objects, watchers)."""

    def __init__(self, source: Callable[[], list[Metric]], watermark: _Watermark) -> None:
        self.source = source
        self.watermark = watermark

    def collect(self) -> Iterator[Metric]:
        yield self.watermark.collect()
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
        self.sli_durations = Histogram(
            "apiserver_request_sli_duration_seconds",
            "[ALPHA] Response latency distribution (not counting webhook duration and priority & fairness "
            "queue wait times) in seconds for each verb, group, version, resource, subresource, scope and "
            "component.",
            _SIZE_LABELS,
            buckets=SLI_BUCKETS,
            registry=r,
        )
        self.sizes = Histogram(
            "apiserver_response_sizes",
            "[STABLE] Response size distribution in bytes for each group, version, verb, resource, subresource, "
            "scope and component.",
            _SIZE_LABELS,
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.watch_events = Counter(
            "apiserver_watch_events",
            "[ALPHA] Number of events sent in watch clients",
            ["group", "version", "kind"],
            registry=r,
        )
        self.watch_event_sizes = Histogram(
            "apiserver_watch_events_sizes",
            "[ALPHA] Watch event size distribution in bytes",
            ["group", "version", "kind"],
            buckets=WATCH_SIZE_BUCKETS,
            registry=r,
        )
        ProcessCollector(registry=r)
        self._children: dict[tuple[tuple[str, ...], int], tuple[Any, Any, Any, Any]] = {}
        self.inflight: dict[int, web.Request] = {}  # id -> request (requests are unhashable)
        self.watermark = _Watermark()
        r.register(_LongRunning(self.inflight))
        r.register(_Gauges(state, self.watermark))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        started = time.perf_counter()
        trackers, token = latencytrackers.begin()
        self.inflight[id(request)] = request
        request[METRICS_KEY] = self
        kind = _inflight_kind(request)
        if kind is not None:
            self.watermark.enter(kind)
        status = 500
        size = 0
        try:
            response = await handler(request)
            status = response.status
            size = _body_size(response)
            return response
        except web.HTTPException as exc:
            status = exc.status
            size = len(exc.body) if isinstance(exc.body, bytes) else 0
            raise
        finally:
            if kind is not None:
                self.watermark.leave(kind)
            self.inflight.pop(id(request), None)
            latencytrackers.end(token)
            self._record(request, status, time.perf_counter() - started, size, trackers.excluded())
            if httplog.isEnabledFor(HTTPLOG_LEVEL):
                _log_request(request, status, time.perf_counter() - started)

    def watch_recorder(self, group: str, version: str, kind: str) -> WatchRecorder:
        """What a watch counts its events with (apiserver_watch_events_total and _sizes)."""
        return WatchRecorder(
            self.watch_events.labels(group, version, kind),
            self.watch_event_sizes.labels(group, version, kind),
        )

    def _record(
        self, request: web.Request, status: int, seconds: float, size: int = 0, excluded: float = 0.0
    ) -> None:
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
                # upstream measures the sizes of reads only
                self.sizes.labels(*labels[:1], *labels[2:]) if labels[0] in ("GET", "LIST") else None,
                self.sli_durations.labels(*labels[:1], *labels[2:]),
            )
        children[0].inc()
        children[1].observe(seconds)
        if children[2] is not None:
            children[2].observe(size)
        children[3].observe(seconds - excluded)

    def exposition(self) -> bytes:
        return render([self.registry, admissionmetrics.REGISTRY])


@dataclass(frozen=True, slots=True)
class WatchRecorder:
    events: Any
    sizes: Any

    def sent(self, size: int) -> None:
        self.events.inc()
        self.sizes.observe(size)


METRICS_KEY = web.RequestKey("apiserver_metrics", ApiServerMetrics)


def _body_size(response: web.StreamResponse) -> int:
    """Bytes of the response body: what a streamed answer wrote, or the body a plain one will send."""
    if response.prepared:
        return int(response.body_length)
    body = getattr(response, "body", None)
    return len(body) if isinstance(body, bytes | bytearray) else 0


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
