"""CPU per call of a list or watch selector (issue 36): what every list with a selector pays per object
and every unindexed watcher pays per event. Figures are reported, never asserted.

  python bench/apiserver/selectorcost.py [--calls 200000] [--out DIR]
  python bench/apiserver/selectorcost.py --smoke --out DIR

Each selector (the shapes kubelets, the scheduler and label-selecting controllers send) is called on a
pod's cached view `--calls` times; CPU time (process_time) per call. No baseline in the run: compare
with the same command on the parent commit, same machine state.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.reporting import bar_svg, run_and_report
from controlplane.apiserver import fieldselect, kinds

SELECTORS = (
    ("", "spec.nodeName=n1"),
    ("app=web", "spec.nodeName=n1"),
    ("", "status.phase!=Succeeded,status.phase!=Failed"),
    ("app=web,tier in (a,b)", ""),
)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    pod = next(k for k in kinds.BUILT_IN if k.kind == "Pod" and k.api_version == "v1")
    view = fieldselect.slim_view(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "a"}},
            "spec": {"nodeName": "n2"},
            "status": {"phase": "Running"},
        }
    )
    out: dict[str, Any] = {"calls": args.calls, "ns_per_call": {}}
    for labels, fields in SELECTORS:
        predicate, _ = fieldselect.predicate(pod, labels, fields)
        assert predicate is not None
        started = time.process_time()
        for _ in range(args.calls):
            predicate(view)
        out["ns_per_call"][f"{labels} {fields}".strip()] = round(
            (time.process_time() - started) / args.calls * 1e9
        )
    out["load_average_1m"] = os.getloadavg()[0]
    return out


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# Selector CPU per call ({r['calls']} calls, load average {r['load_average_1m']:.1f})", ""]
    lines += ["| selector | ns per call |", "| --- | --- |"]
    lines += [f"| `{name}` | {ns} |" for name, ns in r["ns_per_call"].items()]
    return "\n".join(lines)


def svg_plot(r: dict[str, Any]) -> str:
    return bar_svg("Selector CPU per call", list(r["ns_per_call"].items()), "ns")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200_000)
    run_and_report(parser, "apiserver-selectorcost", main, markdown, svg_plot, {"calls": 1000})
