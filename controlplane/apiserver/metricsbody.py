"""The server's /metrics body built in slices of the event loop.

Collecting and rendering every family at once is one synchronous stretch that grows with the label sets
the server has seen (the request histograms by resource, verb and scope): the loop-stall watch
(loopstall.py) measured 150-180 ms of the loop's CPU per scrape under the density bench, during which no
other request is served. Families are collected lazily by their registries, so this module takes them
one at a time, renders each with the same rules as one `exposition.render` of all of them (a family's
text does not depend on the others: the whole is their concatenation), and gives the loop back after
each SLICE of work. A family is its HELP and TYPE lines, then a line per sample: a large one (a request
histogram is a third of the body) is rendered CHUNK samples at a time, its header kept once. Collectors read the loop's own structures unlocked, which is why this stays on the
loop instead of going to a thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kubeclient.exposition import render

SLICE = 0.005  # seconds of work between two yields, as the list answers and the watch feed do
CHUNK = 1000  # samples of one family rendered at a time


class _One(Collector):
    """One family already collected, rendered on its own."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def render_one(metric: Metric) -> bytes:
    """One family's text, as `render` writes it among all the others."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_One(metric))
    return render([registry])


def chunks(metric: Metric, size: int = CHUNK) -> Iterator[bytes]:
    """One family's text in pieces of `size` samples, joined equal to `render_one(metric)`."""
    if len(metric.samples) <= size:
        yield render_one(metric)
        return
    header_done = False
    for start in range(0, len(metric.samples), size):
        part = Metric(metric.name, metric.documentation, metric.type, metric.unit)
        part.samples = metric.samples[start : start + size]
        text = render_one(part)
        if not text:
            continue  # every sample of the piece left out (`_created`)
        if header_done:
            text = text.split(b"\n", 2)[2]  # the HELP and TYPE lines, written with the first piece
        header_done = True
        yield text


async def body(
    registries: Iterable[CollectorRegistry], slice_seconds: float = SLICE, chunk: int = CHUNK
) -> bytes:
    """The registries' text exposition, equal to `render(registries)`, with the loop free between slices."""
    parts: list[bytes] = []
    started = time.perf_counter()
    for registry in registries:
        for metric in registry.collect():
            for text in chunks(metric, chunk):
                parts.append(text)
                if time.perf_counter() - started >= slice_seconds:
                    await asyncio.sleep(0)
                    started = time.perf_counter()
    return b"".join(parts)
