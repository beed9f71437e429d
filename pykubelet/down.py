"""`pykubelet down`: stop what `pykubelet up` started and leave nothing behind, also when `up` was
killed half-way or the daemons crashed (pykubelet.rig.sweep finds them without a complete record)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pykubelet.rig.process import forget_expired_reservations
from pykubelet.rig.sweep import looks_like_a_stack, sweep, ups_for
from pykubelet.up import DEFAULT_STATE_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="the state dir `up` was started with"
    )
    parser.add_argument("--purge", action="store_true", help="also delete the state dir (the cluster's data)")


def run(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    forget_expired_reservations()
    if not looks_like_a_stack(state_dir) and not ups_for(state_dir):
        print(
            f"pykubelet down: no stack in {state_dir} (no record, files or processes): nothing to stop",
            file=sys.stderr,
        )
        return 0
    problems = sweep(state_dir)
    for problem in problems:
        print(f"pykubelet down: {problem}", file=sys.stderr)
    if args.purge and not problems:
        shutil.rmtree(args.state_dir, ignore_errors=True)
    if problems:
        print(f"pykubelet down: the stack in {state_dir} is NOT fully stopped (see above)", file=sys.stderr)
        return 1
    print("pykubelet: stopped", file=sys.stderr)
    return 0
