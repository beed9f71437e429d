"""The priority-and-fairness filter (upstream's WithPriorityAndFairness and its config controller):
runs after authentication and impersonation, classifies the request, waits for a seat of its level
(or answers 429), and marks the response with the X-Kubernetes-PF-* headers.

The configuration is read from the watch cache: every change of a FlowSchema or a
PriorityLevelConfiguration marks it stale, and the next request rebuilds it (a few dozen objects).
Until the mandatory objects are stored (or while one is deleted), their built-in versions serve.
Exempt levels take no seat. Long-running requests other than watches are not subject to it; a watch
holds its seat until its response starts (the watch registered and its initial events queued), as
upstream holds it until the watch is initialized."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from aiohttp import web

from controlplane.apiserver import latencytrackers
from controlplane.apiserver.authn import USER_KEY
from controlplane.apiserver.flowcontrol import defaults
from controlplane.apiserver.flowcontrol.classify import Classifier, flow_hash
from controlplane.apiserver.flowcontrol.metrics import FlowMetrics, Running
from controlplane.apiserver.flowcontrol.queueset import Level, Rejected, Seat
from controlplane.apiserver.flowcontrol.requestinfo import parse
from controlplane.apiserver.flowcontrol.retryafter import DroppedRequests

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from controlplane.storage.cache import CacheEvent, WatchCache

Obj = dict[str, Any]

FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
DUMP_PATH = "/debug/api_priority_and_fairness/dump_priority_levels"
TOO_MANY = "Too many requests, please try again later.\n"
SCHEMAS_BUCKET = "flowschemas.flowcontrol.apiserver.k8s.io"
LEVELS_BUCKET = "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io"

HEADERS_KEY: Any = web.RequestKey("apf_headers", tuple) if hasattr(web, "RequestKey") else "apf_headers"
SEAT_KEY: Any = web.RequestKey("apf_seat", Seat) if hasattr(web, "RequestKey") else "apf_seat"


def nominal_seats(total: int, shares: int, share_sum: int) -> int:
    """A limited level's concurrency limit (upstream's NominalCL), at least one seat, since seats are
    not borrowed here."""
    if share_sum <= 0:
        return 1
    return max(1, math.ceil(total * shares / share_sum))


class Dispatcher:
    def __init__(
        self,
        cache: WatchCache,
        total_seats: int,
        registry: CollectorRegistry,
        wait_limit: float = 15.0,
        enabled: bool = True,
    ) -> None:
        self.cache = cache
        self.total_seats = total_seats
        self.wait_limit = wait_limit
        self.enabled = enabled
        self.levels: dict[str, Level] = {}
        self.exempt: set[str] = set()
        self.classifier: Classifier | None = None
        self._stale = True
        self.metrics = FlowMetrics(registry, self._seats)
        self.dropped = DroppedRequests()

    def start(self) -> None:
        for bucket in (SCHEMAS_BUCKET, LEVELS_BUCKET):
            self.cache.subscribe(bucket, self._changed)
        self._stale = True

    def _changed(self, event: CacheEvent) -> None:
        self._stale = True

    def _seats(self) -> list[tuple[str, int]]:
        return sorted((name, 0 if name in self.exempt else lvl.seats) for name, lvl in self.levels.items())

    # --- configuration -------------------------------------------------------------------------------

    def _objects(self, bucket: str, builtins: tuple[Obj, ...]) -> dict[str, Obj]:
        stored = {c.obj["metadata"]["name"]: c.obj for c in self.cache.list(bucket, f"/{bucket}/")}
        for obj in builtins:
            stored.setdefault(obj["metadata"]["name"], obj)
        return stored

    def _rebuild(self) -> None:
        self._stale = False
        levels = self._objects(LEVELS_BUCKET, defaults.MANDATORY_LEVELS)
        schemas = self._objects(SCHEMAS_BUCKET, defaults.MANDATORY_SCHEMAS)
        share_sum = 0
        for obj in levels.values():
            spec = obj.get("spec") or {}
            share_sum += (spec.get("limited") or spec.get("exempt") or {}).get(
                "nominalConcurrencyShares", 0
            ) or 0
        exempt: set[str] = set()
        fresh: dict[str, Level] = {}
        for name, obj in levels.items():
            spec = obj.get("spec") or {}
            uid = (obj.get("metadata") or {}).get("uid", "")
            if spec.get("type") == "Exempt":
                exempt.add(name)
                fresh[name] = self.levels.get(name) or Level(name, uid, 0)
                fresh[name].uid = uid
                continue
            limited = spec.get("limited") or {}
            seats = nominal_seats(
                self.total_seats, limited.get("nominalConcurrencyShares", 0) or 0, share_sum
            )
            queuing = (
                (limited.get("limitResponse") or {}).get("queuing")
                if ((limited.get("limitResponse") or {}).get("type") == "Queue")
                else None
            )
            queues = (queuing or {}).get("queues", 0)
            hand = min((queuing or {}).get("handSize", 1), max(queues, 1))
            length = (queuing or {}).get("queueLengthLimit", 0)
            level = self.levels.get(name)
            if level is None:
                level = Level(name, uid, seats, queues, hand, length, self.wait_limit)
            else:
                level.reconfigure(uid, seats, queues, hand, length)
            fresh[name] = level
        self.levels, self.exempt = fresh, exempt
        self.classifier = Classifier(list(schemas.values()), set(levels), schemas[defaults.CATCH_ALL])

    # --- the filter ----------------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        user = request.get(USER_KEY)
        if user is None or not self.enabled:
            return await handler(request)
        watch = request.query.get("watch") if request.method == "GET" and request.query_string else None
        info = parse(request.method, request.path, watch)
        if info.long_running and info.verb != "watch":
            return await handler(request)
        if self._stale or self.classifier is None:
            self._rebuild()
        assert self.classifier is not None
        chosen = self.classifier.classify(user, info)
        schema_name = chosen.schema["metadata"]["name"]
        level = self.levels[chosen.level_name]
        headers = ((chosen.schema.get("metadata") or {}).get("uid", ""), level.uid)
        request[HEADERS_KEY] = headers
        dispatched, inqueue, _, waited, _ = self.metrics.children(level.name, schema_name)
        running = self.metrics.running(level.name, schema_name, info.verb == "watch")
        if level.name in self.exempt:
            dispatched.inc()
            # no seat; a watch's execution still ends when its response starts
            exempt_done = _Release(None, running)
            if info.verb == "watch":
                request[SEAT_KEY] = exempt_done
            try:
                return await handler(request)
            finally:
                exempt_done()
        if level.executing >= level.seats or level.waiting:
            inqueue.inc()
            try:
                seat, wait = await level.acquire(flow_hash(schema_name, chosen.flow))
            except Rejected as err:
                self.metrics.reject(level.name, schema_name, err.reason)
                self.metrics.children(level.name, schema_name)[4].observe(0)
                return self._too_many(headers, self.dropped.record(level.name))
            finally:
                inqueue.dec()
        else:
            seat, wait = await level.acquire(0)
        waited.observe(wait)
        latencytrackers.apf_wait(wait)  # left out of apiserver_request_sli_duration_seconds
        dispatched.inc()
        seat_done = _Release(seat, running)
        if info.verb == "watch":
            request[SEAT_KEY] = seat_done
        try:
            return await handler(request)
        finally:
            seat_done()

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """aiohttp's on_response_prepare: the headers on every classified response; a watch's seat back."""
        headers = request.get(HEADERS_KEY)
        if headers is not None:
            response.headers[FLOW_SCHEMA_HEADER] = headers[0]
            response.headers[PRIORITY_LEVEL_HEADER] = headers[1]
        release = request.get(SEAT_KEY)
        if release is not None:
            release()

    def _too_many(self, headers: tuple[str, str], retry_after: int) -> web.Response:
        response = web.Response(status=429, text=TOO_MANY, content_type="text/plain", charset="utf-8")
        response.headers["Retry-After"] = str(retry_after)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers[FLOW_SCHEMA_HEADER] = headers[0]
        response.headers[PRIORITY_LEVEL_HEADER] = headers[1]
        return response

    # --- debugging -----------------------------------------------------------------------------------

    async def dump(self, request: web.Request) -> web.Response:
        """/debug/api_priority_and_fairness/dump_priority_levels, upstream's columns."""
        if self._stale or self.classifier is None:
            self._rebuild()
        header = [
            "PriorityLevelName",
            "ActiveQueues",
            "IsIdle",
            "IsQuiescing",
            "WaitingRequests",
            "ExecutingRequests",
            "DispatchedRequests",
            "RejectedRequests",
            "TimedoutRequests",
            "CancelledRequests",
        ]
        rows = [header]
        for name in sorted(self.levels):
            level = self.levels[name]
            if name in self.exempt:
                rows.append([name] + ["<none>"] * (len(header) - 1))
                continue
            idle = level.executing == 0 and level.waiting == 0
            rows.append(
                [
                    name,
                    str(level.active_queues),
                    str(idle).lower(),
                    "false",
                    str(level.waiting),
                    str(level.executing),
                    str(level.dispatched),
                    str(level.rejected),
                    str(level.timed_out),
                    str(level.cancelled),
                ]
            )
        widths = [max(len(r[i]) for r in rows) + 2 for i in range(len(header))]
        text = "".join(
            "".join((cell + ",").ljust(w) for cell, w in zip(r[:-1], widths, strict=False)) + r[-1] + "\n"
            for r in rows
        )
        return web.Response(text=text, content_type="text/plain")


class _Release:
    """Gives a seat back once (at the watch's start or the request's end), with the metrics."""

    __slots__ = ("seat", "running", "started", "done")

    def __init__(self, seat: Seat | None, running: Running) -> None:
        self.seat, self.running, self.done = seat, running, False
        self.started = running.start()

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            if self.seat is not None:
                self.seat.release()
            self.running.finish(self.started)
