"""The one way every component writes its /metrics: prometheus_client registries rendered in the
Prometheus text format (0.0.4) as upstream's Go components write it (k8s.io/component-base/metrics over
client_golang): no `_created` series, and no family without a sample.

Importing this module turns prometheus_client's `_created` series off for the whole process
(`disable_created_metrics`, read at every scrape), so a registry rendered through `render` or scraped
any other way never shows them. Each component keeps its own CollectorRegistry (tests run several
agents or servers in one process), never the global default one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

disable_created_metrics()

# What generate_latest writes and component-base serves by default (prometheus_client's
# CONTENT_TYPE_LATEST says version=1.0.0, which older scrapers do not know).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Written(Collector):
    """The families of one registry as client_golang writes them: those with samples, no `_created`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            metric.samples = [s for s in metric.samples if not s.name.endswith("_created")]
            if metric.samples:
                yield metric


def render(registries: Iterable[CollectorRegistry]) -> bytes:
    """The text exposition of the registries together (their metric names must not overlap)."""
    out = CollectorRegistry(auto_describe=False)
    for registry in registries:
        out.register(_Written(registry))
    return generate_latest(out)
