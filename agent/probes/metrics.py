"""Probe counts and durations, served by the kubelet API at /metrics/probes as upstream's
prober_probe_total and prober_probe_duration_seconds (aggregated per probe type and handler, not per
pod: 110 pods x 3 probes of per-pod series is more than anyone scrapes from a node agent)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from agent.probes.result import Result
from agent.probes.spec import Kind
from kubeclient.exposition import render

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


def handler_name(action: dict[str, Any]) -> str:
    return next((k for k in ("exec", "httpGet", "tcpSocket", "grpc") if k in action), "unknown")


class ProbeMetrics:
    """The prober's two families in a registry of their own (one per agent)."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=False)
        self.totals = Counter(
            "prober_probe_total",
            "[BETA] Cumulative number of a liveness, readiness or startup probe for a container by result.",
            ["probe_type", "result"],
            registry=r,
        )
        self.durations = Histogram(
            "prober_probe_duration_seconds",
            "[ALPHA] Duration in seconds for a probe response.",
            ["probe_type", "handler"],
            buckets=BUCKETS,
            registry=r,
        )

    def observe(self, kind: Kind, handler: str, result: Result, seconds: float) -> None:
        self.totals.labels(probe_type=kind.value, result=RESULT_LABEL[result]).inc()
        self.durations.labels(probe_type=kind.value, handler=handler).observe(seconds)

    def exposition(self) -> bytes:
        return render([self.registry])
