"""Tables of where an API server's event loop stalled, from the JSON lines its loop-stall watch wrote
(PYKUBELET_LOOP_STALL_MS / PYKUBELET_LOOP_STALL_FILE, controlplane/apiserver/loopstall.py).

A late beat is either the loop busy with its own code or the process waiting for a CPU. The main
thread's CPU over the beat's gap tells them apart: a gap in which the loop's thread used less CPU than the
threshold cannot hold a stretch of code longer than the threshold, so it is counted as `starved`; the
others are `busy` and are grouped by the code their stack samples show (the innermost frame of the
project's own code, else of any library).

Usage: python bench/apiserver/loopstall_report.py STALLS.jsonl [--threshold-ms 50]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from typing import Any

# Where a frame's path starts for code that is not the project's (stdlib or third-party).
LIBRARIES = (
    "asyncio/",
    "aiohttp/",
    "python3.11/",
    "json/",
    "concurrent/",
    "ssl.py",
    "random.py",
    "selectors.py",
    "threading.py",
    "logging/",
    "prometheus_client/",
    "grpc/",
    "yarl/",
    "multidict/",
    "pykubelet/__main__.py",
    "pykubelet/cli.py",
    "controlplane/cli.py",
    "apiserver/loopstall.py",
    "controlplane/apiserver/loopstall.py",
    "<",
)


def is_library(frame: str) -> bool:
    return frame.startswith(LIBRARIES)


def where(stack: list[str]) -> str:
    """The innermost frame of the project's code (`path:function`), else the innermost frame."""
    for frame in reversed(stack):
        if not is_library(frame):
            return frame.rsplit(":", 1)[0]
    return stack[-1].rsplit(":", 1)[0] if stack else "(no sample)"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def summarize(records: list[dict[str, Any]], threshold_ms: float) -> dict[str, Any]:
    stalls = [r for r in records if r["kind"] == "stall"]
    windows = [r for r in records if r["kind"] == "window"]
    gcs = [r for r in records if r["kind"] == "gc"]
    probes = [r for r in records if r["kind"] == "probe" and "error" not in r]
    busy = [r for r in stalls if r["main_cpu_ms"] >= threshold_ms]
    starved = [r for r in stalls if r["main_cpu_ms"] < threshold_ms]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in busy:
        names = Counter(where(s) for s in r["stacks"]) or Counter({"(no sample)": 1})
        groups[names.most_common(1)[0][0]].append(r)
    return {
        "stalls": len(stalls),
        "starved": len(starved),
        "busy": len(busy),
        "groups": {
            name: {
                "count": len(rs),
                "lag_p50_ms": pct([r["lag_ms"] for r in rs], 0.5),
                "lag_max_ms": max(r["lag_ms"] for r in rs),
                "cpu_p50_ms": pct([r["main_cpu_ms"] for r in rs], 0.5),
                "cpu_max_ms": max(r["main_cpu_ms"] for r in rs),
            }
            for name, rs in sorted(groups.items(), key=lambda item: -len(item[1]))
        },
        "starved_lag_p50_ms": pct([r["lag_ms"] for r in starved], 0.5),
        "starved_lag_max_ms": max((r["lag_ms"] for r in starved), default=float("nan")),
        "windows": windows,
        "probes": {
            field: {q: pct([p[field] for p in probes], q) for q in (0.5, 0.99, 1.0)}
            for field in ("revision_ms", "catch_up_ms", "behind")
        }
        if probes
        else {},
        "gc_over_threshold": [(g["generation"], g["ms"], g.get("cpu_ms")) for g in gcs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--threshold-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    with open(args.path) as stream:
        records = [json.loads(line) for line in stream if line.strip()]
    result = summarize(records, args.threshold_ms)
    print(f"stalls over threshold: {result['stalls']} (busy {result['busy']}, starved {result['starved']})")
    print(f"starved: lag p50 {result['starved_lag_p50_ms']} ms, max {result['starved_lag_max_ms']} ms")
    print("| busy stretch (innermost project frame) | count | lag p50/max ms | loop CPU p50/max ms |")
    print("| --- | ---: | ---: | ---: |")
    for name, g in result["groups"].items():
        print(
            f"| {name} | {g['count']} | {g['lag_p50_ms']}/{g['lag_max_ms']} | {g['cpu_p50_ms']}/{g['cpu_max_ms']} |"
        )
    print("| window end | lag p50/p99/max ms | process CPU | loop thread CPU | GC passes (ms) by gen |")
    print("| --- | ---: | ---: | ---: | --- |")
    for w in result["windows"]:
        gc_text = " ".join(f"g{g}:{n}({w['gc_ms'].get(g)})" for g, n in w["gc_count"].items())
        print(
            f"| {w['at']:.0f} | {w['lag_p50_ms']}/{w['lag_p99_ms']}/{w['lag_max_ms']} | "
            f"{w['process_cpu_share']} | {w['main_cpu_share']} | {gc_text} |"
        )
    for field, qs in result["probes"].items():
        print(f"consistent-read probe {field}: p50 {qs[0.5]}, p99 {qs[0.99]}, max {qs[1.0]}")
    print(f"GC passes over threshold (generation, ms, loop CPU ms): {result['gc_over_threshold']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
