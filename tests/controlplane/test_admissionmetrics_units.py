"""The admission histograms (admissionmetrics.py) are written exactly as prometheus_client's Histogram
writes the same observations: names, help, label sets, `le` values, cumulative buckets, count and sum."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from controlplane.apiserver import admissionmetrics
from kubeclient.exposition import render

NAME = "apiserver_admission_controller_admission_duration_seconds"
# Plugin names no real chain has, so other tests' observations in this process are not among them.
OBSERVATIONS = [
    ("probe-a", "admit", "CREATE", False, 0.0001),
    ("probe-a", "admit", "CREATE", False, 0.005),  # on a bound: counted in that bucket
    ("probe-a", "admit", "CREATE", False, 0.0051),
    ("probe-b", "validate", "UPDATE", True, 2.5),
    ("probe-b", "validate", "UPDATE", True, 30.0),  # beyond the last bound: +Inf only
]


def lines(registry: CollectorRegistry) -> list[str]:
    text = render([registry]).decode()
    return [line for line in text.splitlines() if NAME in line and ("probe-" in line or line.startswith("#"))]


def test_the_exposition_is_prometheus_clients_for_the_same_observations() -> None:
    reference = CollectorRegistry(auto_describe=False)
    expected = Histogram(
        NAME,
        admissionmetrics.CONTROLLER.documentation,
        ["name", "type", "operation", "rejected"],
        buckets=admissionmetrics.CONTROLLER.bounds,
        registry=reference,
    )
    for plugin, phase, operation, rejected, seconds in OBSERVATIONS:
        admissionmetrics.controller(plugin, phase, operation, rejected, seconds)
        expected.labels(plugin, phase, operation, "true" if rejected else "false").observe(seconds)
    theirs = lines(reference)
    assert len(theirs) == 2 + 2 * (len(admissionmetrics.CONTROLLER.bounds) + 3)  # HELP, TYPE; 2 series
    assert lines(admissionmetrics.REGISTRY) == theirs
