"""The API server's /metrics body at once and in slices (controlplane/apiserver/metricsbody.py): CPU of
the whole body each way, and the longest stretch the sliced one holds the loop (its largest piece).

The server's metrics are filled with --resources x 7 verbs x 3 scopes label sets of the request counter
and duration histogram (the density bench's scrape held the loop 150-210 ms of CPU at once, measured by
the loop-stall watch). CPU is this thread's, so other load on the machine disturbs it little.

Usage: python bench/apiserver/scrapeslices.py [--resources 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from controlplane.apiserver import admissionmetrics, metricsbody
from controlplane.apiserver.metrics import ApiServerMetrics
from kubeclient.exposition import render

VERBS = ("GET", "LIST", "WATCH", "POST", "PUT", "PATCH", "DELETE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=30)
    args = parser.parse_args()
    metrics = ApiServerMetrics()
    for r in range(args.resources):
        for verb in VERBS:
            for scope in ("resource", "namespace", "cluster"):
                labels = (verb, "", "", "v1", f"res{r}", "", scope, "apiserver")
                metrics.durations.labels(*labels).observe(0.01)
                metrics.requests.labels(*labels, "200").inc()
    registries = [metrics.registry, admissionmetrics.REGISTRY]
    started = time.thread_time()
    whole = render(registries)
    at_once = time.thread_time() - started
    longest = 0.0
    begun = time.thread_time()
    for registry in registries:
        for family in registry.collect():
            pieces = metricsbody.chunks(family)
            while True:
                started = time.thread_time()
                if next(pieces, None) is None:
                    break
                longest = max(longest, time.thread_time() - started)
    sliced = time.thread_time() - begun
    print(
        f"body {len(whole)} bytes: at once {at_once * 1000:.1f} ms CPU in one stretch; in slices "
        f"{sliced * 1000:.1f} ms CPU, longest piece {longest * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
