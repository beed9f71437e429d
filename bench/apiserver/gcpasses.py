"""How long the API server's cyclic-GC passes hold its loop, by the thresholds it sets after its startup
freeze, on a heap shaped like its watch cache under the density bench.

The loop-stall watch (controlplane/apiserver/loopstall.py) saw the server's young-generation passes take
50-300 ms of wall time (a gen1 pass 420-560 ms) under the density bench on a loaded machine: each one a
stretch no request is served in. A pass walks the objects that survived since the last one (about the gen0
threshold's count), so the threshold sets each pass's length; the CPU over a run is about the same for any
threshold (every surviving object is walked once per generation it passes through), and gen2's cadence
(threshold0 x threshold1 x threshold2 net allocations) is kept equal across the settings compared.

Workload: a frozen base heap of `--base` pod-like objects (what the cache held at start), then `--pods`
new pod-like objects kept (what the cache gains), while twice as many request objects come and go, the
last IN_FLIGHT requests' alive at any time (a young pass catches them, as it catches a server's requests in
flight);
every pass timed by gc.callbacks (CPU of this thread and wall). Figures per setting: passes by
generation, p50/max pass CPU ms, total GC CPU seconds, and GC CPU per 1 000 kept objects.

Usage: python bench/apiserver/gcpasses.py [--base 30000] [--pods 30000]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections import deque
from typing import Any

SETTINGS = {
    "before (20000, 20, 50)": (20_000, 20, 50),
    "young passes 10x more often (2000, 20, 500)": (2_000, 20, 500),
    "server's GC_THRESHOLDS: gen1 10x more often (20000, 2, 500)": (20_000, 2, 500),
}


IN_FLIGHT = 200  # requests whose objects are alive at once (the server's concurrency under the bench)


def pod(i: int) -> dict[str, Any]:
    """A pod as the cache holds it: nested dicts and lists, no cycles."""
    return {
        "metadata": {
            "name": f"pod-{i}",
            "namespace": f"ns-{i % 10}",
            "uid": f"{i:032x}",
            "labels": {"app": f"app-{i % 300}", "pod-template-hash": "abc"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"rs-{i % 300}", "uid": "x" * 36}],
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": f"node-{i % 1000}",
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1m"}}}],
            "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "k2", "operator": "Exists"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": t, "status": "True"} for t in "ABCDE"]},
    }


def run(thresholds: tuple[int, int, int], base: int, pods: int) -> dict[str, Any]:
    gc.collect()
    cache: dict[int, dict[str, Any]] = {i: pod(i) for i in range(base)}
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    passes: list[tuple[int, float, float]] = []
    started: list[float] = [0.0, 0.0]

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.thread_time(), time.perf_counter()]
        else:
            passes.append(
                (info["generation"], time.thread_time() - started[0], time.perf_counter() - started[1])
            )

    gc.callbacks.append(timer)
    in_flight: deque[list[dict[str, Any]]] = deque(maxlen=IN_FLIGHT)
    try:
        for i in range(base, base + pods):
            cache[i] = pod(i)
            in_flight.append([pod(i) for _ in range(2)])  # a request's decoded bodies, alive a while
    finally:
        gc.callbacks.remove(timer)
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)
    del cache
    gc.collect()

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else 0.0

    result: dict[str, Any] = {}
    for generation in (0, 1, 2):
        cpu = [c for g, c, _ in passes if g == generation]
        wall = [w for g, _, w in passes if g == generation]
        result[f"gen{generation}"] = {
            "passes": len(cpu),
            "cpu_p50_ms": ms(cpu, 0.5),
            "cpu_max_ms": ms(cpu, 1.0),
            "wall_max_ms": ms(wall, 1.0),
        }
    total = sum(c for _, c, _ in passes)
    result["gc_cpu_s"] = round(total, 3)
    result["gc_cpu_ms_per_1000_kept"] = round(1000 * total / pods * 1000, 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=int, default=30_000)
    parser.add_argument("--pods", type=int, default=30_000)
    args = parser.parse_args()
    for name, thresholds in SETTINGS.items():
        print(name, json.dumps(run(thresholds, args.base, args.pods)))


if __name__ == "__main__":
    main()
