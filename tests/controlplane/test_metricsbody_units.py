"""controlplane/apiserver/metricsbody.py: the /metrics body built family by family, the event loop
running other work between slices, with the very bytes one render of all the registries writes."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter, Histogram

from controlplane.apiserver import admissionmetrics, metricsbody
from controlplane.apiserver.metrics import ApiServerMetrics
from kubeclient.exposition import render


def filled_metrics() -> ApiServerMetrics:
    """A server's metrics with many label sets, an empty family and a family of a second registry."""
    metrics = ApiServerMetrics()
    for i in range(200):
        labels = ("GET", "", "", "v1", f"res{i}", "", "resource", "apiserver")
        metrics.durations.labels(*labels).observe(0.01 * (i % 9))
        metrics.requests.labels(*labels, "200").inc(i)
    metrics.watch_events.labels("", "v1", "Pod").inc()
    return metrics


def steady(body: bytes) -> bytes:
    """The body less the process family's lines (its CPU seconds and memory move between two renders)."""
    return b"\n".join(
        line
        for line in body.split(b"\n")
        if not line.removeprefix(b"# HELP ").removeprefix(b"# TYPE ").startswith(b"process_")
    )


def extra_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    Counter("empty_total", "A family with no sample yet.", ["x"], registry=registry)
    Histogram("other_seconds", "Another registry's histogram.", registry=registry).observe(0.2)
    return registry


async def test_the_body_is_the_one_render_of_all_registries() -> None:
    metrics = filled_metrics()
    registries = [metrics.registry, extra_registry(), admissionmetrics.REGISTRY]
    expected = render(registries)
    assert b"empty_total" not in expected
    assert b"_created" not in expected
    assert steady(await metricsbody.body(registries)) == steady(expected)
    assert steady(await metricsbody.body(registries, slice_seconds=0.0)) == steady(expected)
    # a family in pieces: its header once, every sample in order, `_created` samples still left out
    for chunk in (1, 7, 1000):
        assert steady(await metricsbody.body(registries, slice_seconds=0.0, chunk=chunk)) == steady(expected)


async def test_the_loop_serves_another_task_between_slices() -> None:
    metrics = filled_metrics()
    registries = [metrics.registry, extra_registry()]
    ticks = 0
    done = False

    async def other() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    ticks = 0
    families = sum(1 for registry in registries for _ in registry.collect())
    body = await metricsbody.body(registries, slice_seconds=0.0)  # a yield after every piece
    done = True
    await task
    assert steady(body) == steady(render(registries))
    assert ticks >= families - 1


async def test_the_server_scrape_matches_its_metrics_exposition() -> None:
    metrics = filled_metrics()
    expected = metrics.exposition()
    body = await metricsbody.body([metrics.registry, admissionmetrics.REGISTRY])
    assert b"process_cpu_seconds_total" in body
    assert steady(body) == steady(expected)
