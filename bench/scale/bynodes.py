"""Density's figures against cluster size, joined from runs taken one size at a time.

At 2 000 nodes one density size takes most of an hour of a quiet machine, so the sizes are run one by one
(`density.py --nodes N --out DIR`, each on a quiet machine) and this joins their reports into one: the
tables of density's report over every size, the plot of latency against N, and what issue 36 asks of
them: for each N which SLO holds, the largest N that holds every one, and the first to break beyond it,
by both definitions of API latency (client-timed probes, upstream's SLI over 1-minute windows and over
the whole run).

Runs are joined only when they measured the same benchmark (store, API servers, pods per node, pod rate,
the controller manager's QPS); a size measured twice is refused too, since which one counts is the
reader's choice, not this script's. Each size keeps the file it came from and the commit it measured.

Usage: python bench/scale/bynodes.py RESULT.json... [--name scale-density-by-nodes] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import RESULTS, write_report
from bench.scale import density

# The settings that make two density runs the same benchmark.
SAME = ("store", "apiservers", "pods_per_node", "rate_pods_per_s", "controller_manager_qps")


class NotJoinable(ValueError):
    """The runs given did not measure the same benchmark, or measured one size twice."""


def join(results: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One density result over every size of `results` ((source name, result) pairs), sizes ascending."""
    if not results:
        raise NotJoinable("no density result to join")
    first_name, first = results[0]
    for name, result in results[1:]:
        differs = [
            f"{key} {result.get(key)!r} (not {first.get(key)!r} as in {first_name})"
            for key in SAME
            if result.get(key) != first.get(key)
        ]
        if differs:
            raise NotJoinable(f"{name} measured another benchmark: {', '.join(differs)}")
    runs: list[dict[str, Any]] = []
    seen: dict[int, str] = {}
    for name, result in results:
        for run in result["runs"]:
            if run["nodes"] in seen:
                raise NotJoinable(
                    f"{run['nodes']} nodes measured twice: in {seen[run['nodes']]} and in {name}"
                )
            seen[run["nodes"]] = name
            runs.append({**run, "source": name, "commit": result.get("commit")})
    runs.sort(key=lambda run: run["nodes"])
    return {
        **{key: first.get(key) for key in SAME},
        "cpus": first.get("cpus"),
        "slo_seconds": first.get("slo_seconds", density.SLO),
        "definitions": first.get("definitions", density.DEFINITIONS),
        "runs": runs,
        "verdict": verdict(runs),
    }


def held_by_definition(run: dict[str, Any]) -> dict[str, dict[str, bool]]:
    """Per definition, each SLO of this size and whether it held: the client-timed probes and pod
    startup (density's `slo_held`), and upstream's SLI per class over 1-minute windows and the whole run
    (absent in runs that predate the SLI)."""
    held = {"client-timed": dict(run["slo_held"])}
    sli = run.get("api_sli")
    if sli:
        for judged, key in (("SLI, 1-minute windows", "windowed"), ("SLI, whole run", "whole_run")):
            held[judged] = {name: c["held"] for name, c in sli[key]["classes"].items() if c["groups"]}
    return held


def verdict(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per definition: the sizes measured, the largest N holding every SLO below which no size broke one,
    and the first size that broke one with the SLOs it broke."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:  # ascending sizes
        for definition, held in held_by_definition(run).items():
            entry = out.setdefault(
                definition, {"sizes": [], "largest_holding_all": None, "first_broken": None}
            )
            entry["sizes"].append(run["nodes"])
            broken = sorted(name for name, ok in held.items() if not ok)
            if entry["first_broken"] is not None:
                continue
            if broken:
                entry["first_broken"] = {"nodes": run["nodes"], "slos": broken}
            else:
                entry["largest_holding_all"] = run["nodes"]
    return out


def markdown(joined: dict[str, Any]) -> str:
    lines = [
        f"# {density.title(joined)}: against cluster size",
        "",
        "Each size was run on its own on a quiet machine and joined here (`bench/scale/bynodes.py`); "
        "the load around each size is in the first table.",
        "",
        "| nodes | from | commit |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {r['nodes']} | {r['source']} | {(r.get('commit') or '-')[:12]} |" for r in joined["runs"]]
    lines += [
        "",
        "| definition | sizes | largest N holding every SLO | first broken: N, SLOs |",
        "| --- | --- | --- | --- |",
    ]
    for definition, v in joined["verdict"].items():
        first = v["first_broken"]
        lines.append(
            f"| {definition} | {', '.join(str(n) for n in v['sizes'])} "
            f"| {v['largest_holding_all'] or 'none'} "
            f"| {'-' if first is None else str(first['nodes']) + ': ' + ', '.join(first['slos'])} |"
        )
    return "\n".join(lines + [""] + density.tables(joined)) + "\n"


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "results", nargs="+", type=Path, help="density reports (JSON), one or more sizes each"
    )
    parser.add_argument("--name", default="scale-density-by-nodes", help="the joined report's file name")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"where the report goes (default {RESULTS})"
    )
    args = parser.parse_args()
    try:
        joined = join([(path.name, json.loads(path.read_text())) for path in args.results])
    except NotJoinable as e:
        parser.error(str(e))
    text = markdown(joined)
    write_report(args.out, args.name, joined, text, density.svg(joined))
    print(text)


if __name__ == "__main__":
    cli()
