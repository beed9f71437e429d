"""Admission latencies with upstream's names, labels and buckets (k8s.io/apiserver/pkg/admission/metrics):
each admission phase (`step`: the mutating or the validating chain), each plugin (`controller`) and each
admission webhook call (`webhook`), by operation, type (admit or validate) and whether it refused.
As upstream's, the histograms live in one process-wide registry the server's /metrics adds to its own.

Every write passes each plugin of the chain (two dozen observations per request), so an observation here
is a dict lookup and two additions (`_Histogram`), exposed at scrape time as prometheus_client's Histogram
would show it; prometheus_client's own takes a lock twice per observation and cost more than the plugins.
Observations and scrapes both happen on the server's event loop.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

REGISTRY = CollectorRegistry(auto_describe=False)
_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5)
_WEBHOOK_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25)


class _Histogram(Collector):
    """A histogram family: per label values, the count of observations in each bucket (le: the first
    bound not below the value, +Inf last) and their sum."""

    def __init__(
        self, name: str, documentation: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> None:
        self.name, self.documentation, self.labels = name, documentation, labels
        self.bounds = buckets
        self.series: dict[tuple[str, ...], list[float]] = {}  # label values -> [bucket counts..., sum]
        REGISTRY.register(self)

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = [0.0] * (len(self.bounds) + 2)
        series[bisect_left(self.bounds, seconds)] += 1
        series[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        les = [*(floatToGoString(b) for b in self.bounds), "+Inf"]
        for labels, series in self.series.items():
            counts = list(accumulate(series[:-1]))
            family.add_metric(list(labels), list(zip(les, counts, strict=True)), series[-1])
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labels)


STEP = _Histogram(
    "apiserver_admission_step_admission_duration_seconds",
    "[STABLE] Admission sub-step latency histogram in seconds, broken out for each operation and API resource "
    "and step type (validate or admit).",
    ("type", "operation", "rejected"),
    _BUCKETS,
)
CONTROLLER = _Histogram(
    "apiserver_admission_controller_admission_duration_seconds",
    "[STABLE] Admission controller latency histogram in seconds, identified by name and broken out for each "
    "operation and API resource and type (validate or admit).",
    ("name", "type", "operation", "rejected"),
    _BUCKETS,
)
WEBHOOK = _Histogram(
    "apiserver_admission_webhook_admission_duration_seconds",
    "[STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each "
    "operation and API resource and type (validate or admit).",
    ("name", "type", "operation", "rejected"),
    _WEBHOOK_BUCKETS,
)


def step(phase: str, operation: str, rejected: bool, seconds: float) -> None:
    STEP.observe((phase, operation, _flag(rejected)), seconds)


def controller(name: str, phase: str, operation: str, rejected: bool, seconds: float) -> None:
    CONTROLLER.observe((name, phase, operation, _flag(rejected)), seconds)


def webhook(name: str, phase: str, operation: str, rejected: bool, seconds: float) -> None:
    WEBHOOK.observe((name, phase, operation, _flag(rejected)), seconds)


def _flag(value: bool) -> str:
    return "true" if value else "false"
