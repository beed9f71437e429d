"""Probe counts and durations, served by the kubelet API at /metrics/probes as upstream's
prober_probe_total and prober_probe_duration_seconds (aggregated per probe type and handler, not per
pod: 110 pods x 3 probes of per-pod series is more than anyone scrapes from a node agent)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from agent.probes.result import Result
from agent.probes.spec import Kind

BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
RESULT_LABEL = {
    Result.SUCCESS: "successful",
    Result.WARNING: "successful",
    Result.FAILURE: "failed",
    Result.UNKNOWN: "unknown",
}


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    n: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.n += 1


def handler_name(action: dict[str, Any]) -> str:
    return next((k for k in ("exec", "httpGet", "tcpSocket", "grpc") if k in action), "unknown")


class ProbeMetrics:
    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], int] = {}
        self.durations: dict[tuple[str, str], Histogram] = {}

    def observe(self, kind: Kind, handler: str, result: Result, seconds: float) -> None:
        probe_type = kind.value
        key = (probe_type, RESULT_LABEL[result])
        self.totals[key] = self.totals.get(key, 0) + 1
        self.durations.setdefault((probe_type, handler), Histogram()).observe(seconds)

    def exposition(self) -> str:
        """Prometheus text format."""
        lines = [
            "# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.",
            "# TYPE prober_probe_total counter",
        ]
        for (probe_type, result), count in sorted(self.totals.items()):
            lines.append(f'prober_probe_total{{probe_type="{probe_type}",result="{result}"}} {count}')
        lines += [
            "# HELP prober_probe_duration_seconds Duration in seconds for a probe response.",
            "# TYPE prober_probe_duration_seconds histogram",
        ]
        for (probe_type, handler), hist in sorted(self.durations.items()):
            labels = f'probe_type="{probe_type}",handler="{handler}"'
            running = 0
            for bound, count in zip((*BUCKETS, float("inf")), hist.counts, strict=True):
                running += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'prober_probe_duration_seconds_bucket{{{labels},le="{le}"}} {running}')
            lines.append(f"prober_probe_duration_seconds_sum{{{labels}}} {hist.total}")
            lines.append(f"prober_probe_duration_seconds_count{{{labels}}} {hist.n}")
        return "\n".join(lines) + "\n"
