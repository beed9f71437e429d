"""One scheduling cycle's observer: plugin and extension point durations into upstream's histograms,
labelled with upstream's status codes.

A filter's reasons become the code upstream's plugin would have returned: `Unschedulable` for what
eviction can fix (the reasons preemption treats as resolvable), `UnschedulableAndUnresolvable` for the
rest, `Success` for none.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.scheduler.framework import SUCCESS, UNRESOLVABLE_STATUS, UNSCHEDULABLE_STATUS
from controlplane.scheduler.metrics import SchedulerMetrics
from controlplane.scheduler.preemption import resolvable

SAMPLE_EVERY = 10  # upstream's pluginMetricsSamplePercent: 10


def status_code(status: str | tuple[str, ...]) -> str:
    if isinstance(status, str):
        return status
    if not status:
        return SUCCESS
    return UNSCHEDULABLE_STATUS if resolvable(status) else UNRESOLVABLE_STATUS


class CycleMetrics:
    def __init__(self, metrics: SchedulerMetrics, profile: str, sampled: bool) -> None:
        self.metrics = metrics
        self.profile = profile
        self.sampled = sampled

    def plugin(self, name: str, point: str, status: str | tuple[str, ...], seconds: float) -> None:
        self.metrics.plugin(name, point, status if isinstance(status, str) else status_code(status), seconds)

    def plugin_calls(
        self, name: str, point: str, status: str | tuple[str, ...], seconds: Sequence[float]
    ) -> None:
        self.metrics.plugin_many(name, point, status_code(status), seconds)

    def point(self, point: str, status: str | tuple[str, ...], seconds: float) -> None:
        self.metrics.point(point, status_code(status), self.profile, seconds)
