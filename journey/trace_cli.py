"""`pykubelet trace KIND/NAME [-n NS] [--json] [--svg FILE] [--follow]`: one object's journey through the
components, from the API alone (see journey/timeline.py for which times are exact)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from journey import auditlog, graph
from journey.connect import add_common, open_client, target
from journey.kinds import BY_KIND, Kind
from journey.svg import render_svg
from journey.timeline import Step, gap_text, parse_time, precision_note, render, timeline
from kubeclient.client import KubeClient
from kubeclient.config import ConfigError
from kubeclient.errors import ApiError
from kubeclient.informer import Informer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--svg", metavar="FILE", help="also write the timeline as an SVG sequence diagram")
    parser.add_argument(
        "--follow", "-f", action="store_true", help="keep watching and print new steps (Ctrl-C ends)"
    )
    parser.add_argument(
        "--audit-log",
        metavar="PATH",
        default=None,
        help="the API server's audit log (audit.k8s.io/v1 JSON lines) for exact times and writers "
        "(default: the audit.log beside the kubeconfig, as `pykubelet up` keeps it, if there is one)",
    )


def _json(kind: Kind, name: str, namespace: str, steps: list[Step], audit_path: str | None) -> str:
    return json.dumps(
        {
            "object": f"{kind.kind} {name}",
            "namespace": namespace,
            "auditLog": audit_path,
            "approximate": precision_note(audit_path),
            "steps": [s.to_dict() for s in steps],
        },
        indent=2,
    )


def audit_path(args: argparse.Namespace) -> Path | None:
    """--audit-log, else the stack's log beside the kubeconfig; None: the API alone."""
    if args.audit_log:
        path = Path(args.audit_log)
        if not path.is_file():
            raise ValueError(f"--audit-log {path}: no such file")
        return path
    return auditlog.find_stack_log(args.kubeconfig)


def _audit(journey: graph.Journey, namespace: str, path: Path | None) -> auditlog.AuditIndex | None:
    if path is None:
        return None
    created = parse_time(graph.meta(journey.root).get("creationTimestamp"))
    return auditlog.load(path, namespace, created[0] if created else None)


async def trace_steps(
    client: KubeClient, kind: Kind, name: str, namespace: str, log: Path | None
) -> list[Step]:
    """What `pykubelet trace` prints, as steps: the journey's reads, then its timeline (with the audit
    log's writes when `log` is given)."""
    journey = await graph.collect(client, kind, name, namespace)
    return timeline(journey, _audit(journey, namespace, log))


async def _once(
    kind: Kind, name: str, namespace: str, args: argparse.Namespace, log: Path | None
) -> list[Step]:
    client, _ = open_client(args)
    async with client:
        return await trace_steps(client, kind, name, namespace, log)


async def _follow_from(
    kind: Kind, name: str, namespace: str, args: argparse.Namespace, seen: set, log: Path | None
) -> None:
    client, _ = open_client(args)
    async with client:
        await _follow(client, kind, name, namespace, seen, args.json, log)


def _trace(args: argparse.Namespace) -> int:
    kind, name, namespace = target(args)
    log = audit_path(args)
    shown = str(log) if log else None
    steps = asyncio.run(_once(kind, name, namespace, args, log))
    if args.svg:
        Path(args.svg).write_text(render_svg(steps, f"{kind.kind} {namespace}/{name}"))
    print(
        _json(kind, name, namespace, steps, shown) if args.json else render(steps, shown),
        end="" if not args.json else "\n",
    )
    sys.stdout.flush()
    if args.follow:
        asyncio.run(_follow_from(kind, name, namespace, args, {s.key for s in steps}, log))
    return 0


async def _follow(
    client, kind: Kind, name: str, namespace: str, seen: set, as_json: bool, log: Path | None = None
) -> None:
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
            journey = graph.build(dict(root, kind=kind.kind), pools)
            steps = timeline(journey, _audit(journey, namespace, log))
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
