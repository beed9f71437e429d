"""`pykubelet trace KIND/NAME [-n NS] [--json] [--svg FILE] [--follow]`: one object's journey through the
components, from the API alone (see journey/timeline.py for which times are exact)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from journey import graph
from journey.connect import add_common, open_client, target
from journey.kinds import BY_KIND, Kind
from journey.svg import render_svg
from journey.timeline import Step, gap_text, render, timeline
from kubeclient.config import ConfigError
from kubeclient.errors import ApiError
from kubeclient.informer import Informer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--svg", metavar="FILE", help="also write the timeline as an SVG sequence diagram")
    parser.add_argument(
        "--follow", "-f", action="store_true", help="keep watching and print new steps (Ctrl-C ends)"
    )


def _json(kind: Kind, name: str, namespace: str, steps: list[Step]) -> str:
    return json.dumps(
        {
            "object": f"{kind.kind} {name}",
            "namespace": namespace,
            "approximate": "the times and gaps of steps with exact=false are approximate: 1 s resolution "
            "(creationTimestamp, managedFields, conditions, core/v1 events); managedFields keep only each "
            "manager's last write",
            "steps": [s.to_dict() for s in steps],
        },
        indent=2,
    )


async def _once(kind: Kind, name: str, namespace: str, args: argparse.Namespace) -> list[Step]:
    client, _ = open_client(args)
    async with client:
        return timeline(await graph.collect(client, kind, name, namespace))


async def _follow_from(kind: Kind, name: str, namespace: str, args: argparse.Namespace, seen: set) -> None:
    client, _ = open_client(args)
    async with client:
        await _follow(client, kind, name, namespace, seen, args.json)


def _trace(args: argparse.Namespace) -> int:
    kind, name, namespace = target(args)
    steps = asyncio.run(_once(kind, name, namespace, args))
    if args.svg:
        Path(args.svg).write_text(render_svg(steps, f"{kind.kind} {namespace}/{name}"))
    print(
        _json(kind, name, namespace, steps) if args.json else render(steps), end="" if not args.json else "\n"
    )
    sys.stdout.flush()
    if args.follow:
        asyncio.run(_follow_from(kind, name, namespace, args, {s.key for s in steps}))
    return 0


async def _follow(client, kind: Kind, name: str, namespace: str, seen: set, as_json: bool) -> None:
    """Watch the journey's pools (one informer per kind) and print each step not printed before."""
    informers = {k: Informer(client, BY_KIND[k].collection(namespace)) for k in graph.POOLS}
    if kind.kind not in informers:
        informers[kind.kind] = Informer(client, kind.collection(namespace))
    changed = asyncio.Event()
    for inf in informers.values():
        inf.add_handler(
            on_add=lambda _o: changed.set(),
            on_update=lambda _a, _b: changed.set(),
            on_delete=lambda _o: changed.set(),
        )
    tasks = [asyncio.create_task(inf.run()) for inf in informers.values()]
    try:
        while True:
            await changed.wait()
            changed.clear()
            await asyncio.sleep(0.2)  # let a burst of watch events land before recomputing
            root = informers[kind.kind].get(f"{namespace}/{name}")
            if root is None:
                continue
            pools = {k: [dict(o, kind=o.get("kind") or k) for o in informers[k].list()] for k in graph.POOLS}
            steps = timeline(graph.build(dict(root, kind=kind.kind), pools))
            for step in steps:
                if step.key in seen:
                    continue
                seen.add(step.key)
                if as_json:
                    print(json.dumps(step.to_dict()), flush=True)
                else:
                    cause = f", {gap_text(step, steps[step.cause])}" if step.cause is not None else ""
                    mark = " " if step.exact else "~"
                    print(
                        f"{mark}{step.time:%H:%M:%S}  {step.obj} {step.what} by {step.writer}{cause}",
                        flush=True,
                    )
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run(args: argparse.Namespace) -> int:
    try:
        return _trace(args)
    except (ValueError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ApiError as err:
        print(f"error: {err.message or err}", file=sys.stderr)
        return 1
