"""A labelled Prometheus histogram that takes a batch of observations at once.

scheduler_plugin_execution_duration_seconds is observed for every filter on every node of a sampled
cycle (upstream's per-call Filter timing): thousands of observations in one decision at 500 nodes and
more. prometheus_client's Histogram takes them one at a time, each through two locked updates and a
walk of the bucket bounds, which cost a sampled decision several times the filtering itself; here a
cycle's durations of one series are counted into plain integers by bisection and added in one go.
Rendered as prometheus_client's Histogram renders (cumulative `_bucket` series with `le`, then `_count`
and `_sum`), so /metrics shows the same family either way.

Observations come from the scheduler's event loop only; a scrape reads the counts as they are.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


@dataclass(slots=True)
class _Series:
    counts: list[int]  # per bucket, not cumulative; the last is +Inf's
    total: float = 0.0


@dataclass(eq=False)  # registered by identity, as every collector
class BatchHistogram(Collector):
    name: str
    documentation: str
    labelnames: tuple[str, ...]
    bounds: tuple[float, ...]  # upper bounds, ascending, without +Inf
    _series: dict[tuple[str, ...], _Series] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._le = [floatToGoString(b) for b in self.bounds] + ["+Inf"]

    def observe(self, labels: tuple[str, ...], seconds: float) -> None:
        self.observe_many(labels, (seconds,))

    def observe_many(self, labels: tuple[str, ...], values: Sequence[float]) -> None:
        """Each value goes into the first bucket whose bound it does not exceed (as Histogram.observe)."""
        if not values:
            return  # no series appears for nothing observed
        series = self._series.get(labels)
        if series is None:
            if len(labels) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values wanted, got {labels}")
            series = self._series[labels] = _Series([0] * (len(self.bounds) + 1))
        counts, bounds, total = series.counts, self.bounds, series.total
        for v in values:
            counts[bisect_left(bounds, v)] += 1
            total += v  # one at a time, in order, as Histogram adds them (sum() rounds otherwise)
        series.total = total

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in list(self._series.items()):
            cumulative, running = [], 0
            for le, n in zip(self._le, list(series.counts), strict=True):
                running += n
                cumulative.append((le, float(running)))
            family.add_metric(list(labels), cumulative, series.total)
        yield family
