"""What every benchmark shares: the --smoke/--out options and writing its report (JSON, markdown, SVG).

A benchmark nobody runs rots (two of them died at start-up for months after the rig changed under
them), so each has a smoke size that finishes in seconds and that the test suite runs
(tests/bench/test_smoke.py). A smoke run writes the same three files as a full run, but only into the
folder given with --out: the committed results in bench/results/ are the full runs' alone.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny counts, seconds long: proves the benchmark still runs (needs --out)",
    )
    parser.add_argument("--out", type=Path, default=None, help=f"where the report goes (default {RESULTS})")


def out_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """--out, or bench/results/ for a full run; a smoke run must say where it writes."""
    if args.out is None:
        if args.smoke:
            parser.error("--smoke needs --out DIR: a smoke run never writes into bench/results")
        return RESULTS
    return args.out


def run_and_report(
    parser: argparse.ArgumentParser,
    name: str,
    main: Callable[[argparse.Namespace], Awaitable[Any]],
    markdown: Callable[[Any], str],
    svg_plot: Callable[[Any], str],
    smoke: dict[str, Any] | None = None,
) -> Any:
    """What an in-process benchmark's `__main__` does: the run options, the smoke sizes over the
    parsed arguments, `main(args)` on the components' event loop (uvloop: the figures must be those of
    the loop the components run on), then the report written and printed."""
    import asyncio

    from kubeclient.eventloop import loop_factory

    add_run_options(parser)
    args = parser.parse_args()
    out = out_dir(parser, args)
    if args.smoke and smoke:
        vars(args).update(smoke)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        result = runner.run(main(args))
    text = markdown(result)
    write_report(out, name, result, text, svg_plot(result))
    print(text)
    return result


def json_safe(data: Any) -> Any:
    """NaN (a figure that has no value in this run) becomes null: JSON has no NaN."""
    if isinstance(data, float) and math.isnan(data):
        return None
    if isinstance(data, dict):
        return {k: json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def write_report(out: Path, name: str, data: Any, markdown: str, svg: str) -> list[Path]:
    """out/name.json, out/name.md (which shows the plot) and out/name.svg; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md", out / f"{name}.svg"]
    paths[0].write_text(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")
    paths[1].write_text(markdown.rstrip("\n") + f"\n\n![plot]({name}.svg)\n")
    paths[2].write_text(svg)
    print(f"wrote {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return paths


def bar_svg(title: str, bars: list[tuple[str, float]], unit: str) -> str:
    """Horizontal bars with their values, without a plotting library."""
    width, bar_h, gap, left = 720, 22, 10, 300
    top = max((v for _, v in bars), default=0.0) or 1.0
    scale = (width - left - 80) / top
    height = 40 + len(bars) * (bar_h + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<text x="10" y="18" font-size="14">{title} ({unit})</text>',
    ]
    for i, (label, value) in enumerate(bars):
        y = 30 + i * (bar_h + gap)
        w = max(value, 0.0) * scale
        parts += [
            f'<text x="10" y="{y + bar_h * 0.7:.0f}">{label}</text>',
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="#2a6ebb"/>',
            f'<text x="{left + w + 4:.0f}" y="{y + bar_h * 0.7:.0f}">{value:g}</text>',
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
