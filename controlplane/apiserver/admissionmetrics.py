"""Admission latencies with upstream's names, labels and buckets (k8s.io/apiserver/pkg/admission/metrics):
each admission phase (`step`: the mutating or the validating chain), each plugin (`controller`) and each
admission webhook call (`webhook`), by operation, type (admit or validate) and whether it refused.
As upstream's, the histograms live in one process-wide registry the server's /metrics adds to its own."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Histogram

REGISTRY = CollectorRegistry(auto_describe=False)
_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5)
_WEBHOOK_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25)

STEP = Histogram(
    "apiserver_admission_step_admission_duration_seconds",
    "[STABLE] Admission sub-step latency histogram in seconds, broken out for each operation and API resource "
    "and step type (validate or admit).",
    ["type", "operation", "rejected"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
CONTROLLER = Histogram(
    "apiserver_admission_controller_admission_duration_seconds",
    "[STABLE] Admission controller latency histogram in seconds, identified by name and broken out for each "
    "operation and API resource and type (validate or admit).",
    ["name", "type", "operation", "rejected"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
WEBHOOK = Histogram(
    "apiserver_admission_webhook_admission_duration_seconds",
    "[STABLE] Admission webhook latency histogram in seconds, identified by name and broken out for each "
    "operation and API resource and type (validate or admit).",
    ["name", "type", "operation", "rejected"],
    buckets=_WEBHOOK_BUCKETS,
    registry=REGISTRY,
)


# Each label set's child, looked up once: prometheus_client's labels() costs more than the observation,
# and every write passes each plugin of the chain (a dozen observations per request).
_STEPS: dict[tuple[str, str, bool], Any] = {}
_CONTROLLERS: dict[tuple[str, str, str, bool], Any] = {}


def step(phase: str, operation: str, rejected: bool, seconds: float) -> None:
    key = (phase, operation, rejected)
    child = _STEPS.get(key)
    if child is None:
        child = _STEPS[key] = STEP.labels(phase, operation, _flag(rejected))
    child.observe(seconds)


def controller(name: str, phase: str, operation: str, rejected: bool, seconds: float) -> None:
    key = (name, phase, operation, rejected)
    child = _CONTROLLERS.get(key)
    if child is None:
        child = _CONTROLLERS[key] = CONTROLLER.labels(name, phase, operation, _flag(rejected))
    child.observe(seconds)


def webhook(name: str, phase: str, operation: str, rejected: bool, seconds: float) -> None:
    WEBHOOK.labels(name, phase, operation, _flag(rejected)).observe(seconds)


def _flag(value: bool) -> str:
    return "true" if value else "false"
