"""API priority and fairness metrics with upstream's names, labels and buckets
(k8s.io/apiserver/pkg/util/flowcontrol/metrics), registered on the API server's /metrics registry:
requests and seats waiting, executing and dispatched, their waits and execution times (a request holds
one seat here), rejections and each level's nominal seats.
Label children are looked up once per (schema, level), so a request costs a few counter operations."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

WAIT_BUCKETS = (0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30)
_LABELS = ["priority_level", "flow_schema"]


class _Seats(Collector):
    def __init__(self, source: Callable[[], list[tuple[str, int]]]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "apiserver_flowcontrol_nominal_limit_seats",
            "[BETA] Nominal number of execution seats configured for each priority level",
            labels=["priority_level"],
        )
        for name, seats in self.source():
            family.add_metric([name], seats)
        yield family


@dataclass(frozen=True, slots=True)
class Running:
    """A flow's executing requests: started (one request, one seat) and finished (its execution time)."""

    requests: Any
    seats: Any
    seconds: Any

    def start(self) -> float:
        self.requests.inc()
        self.seats.inc()
        return time.perf_counter()

    def finish(self, started: float) -> None:
        self.requests.dec()
        self.seats.dec()
        self.seconds.observe(time.perf_counter() - started)


class FlowMetrics:
    def __init__(self, registry: CollectorRegistry, seats: Callable[[], list[tuple[str, int]]]) -> None:
        r = registry
        self.rejected = Counter(
            "apiserver_flowcontrol_rejected_requests",
            "[BETA] Number of requests rejected by API Priority and Fairness subsystem",
            [*_LABELS, "reason"],
            registry=r,
        )
        self.dispatched = Counter(
            "apiserver_flowcontrol_dispatched_requests",
            "[BETA] Number of requests executed by API Priority and Fairness subsystem",
            _LABELS,
            registry=r,
        )
        self.inqueue = Gauge(
            "apiserver_flowcontrol_current_inqueue_requests",
            "[BETA] Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            _LABELS,
            registry=r,
        )
        self.executing = Gauge(
            "apiserver_flowcontrol_current_executing_requests",
            "[BETA] Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the "
            "API Priority and Fairness subsystem",
            _LABELS,
            registry=r,
        )
        self.wait = Histogram(
            "apiserver_flowcontrol_request_wait_duration_seconds",
            "[BETA] Length of time a request spent waiting in its queue",
            [*_LABELS, "execute"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.executing_seats = Gauge(
            "apiserver_flowcontrol_current_executing_seats",
            "[BETA] Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, "
            "any stage otherwise) requests in the API Priority and Fairness subsystem",
            _LABELS,
            registry=r,
        )
        self.execution = Histogram(
            "apiserver_flowcontrol_request_execution_seconds",
            "[ALPHA] Duration of initial stage (for a WATCH) or any (for a non-WATCH) stage of request execution "
            "in the API Priority and Fairness subsystem",
            [*_LABELS, "type"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        r.register(_Seats(seats))
        self._children: dict[tuple[str, str], tuple[Any, Any, Any, Any, Any]] = {}
        self._running: dict[tuple[str, str, bool], Running] = {}

    def children(self, level: str, schema: str) -> tuple[Any, Any, Any, Any, Any]:
        """(dispatched, inqueue, executing, wait{execute=true}, wait{execute=false}) of a flow's labels."""
        key = (level, schema)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (
                self.dispatched.labels(level, schema),
                self.inqueue.labels(level, schema),
                self.executing.labels(level, schema),
                self.wait.labels(level, schema, "true"),
                self.wait.labels(level, schema, "false"),
            )
        return found

    def running(self, level: str, schema: str, watch: bool) -> Running:
        """The gauges and histogram of a flow's executing requests (a request holds one seat)."""
        key = (level, schema, watch)
        found = self._running.get(key)
        if found is None:
            found = self._running[key] = Running(
                self.children(level, schema)[2],
                self.executing_seats.labels(level, schema),
                self.execution.labels(level, schema, "watch" if watch else "regular"),
            )
        return found

    def reject(self, level: str, schema: str, reason: str) -> None:
        self.rejected.labels(level, schema, reason).inc()
