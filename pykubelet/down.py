"""`pykubelet down`: stop what `pykubelet up` started and leave nothing behind, also when `up` was
killed half-way or the daemons crashed (pykubelet.rig.sweep finds them without a complete record)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from pykubelet.rig.sweep import sweep
from pykubelet.up import DEFAULT_STATE_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--purge", action="store_true", help="also delete the state dir (the cluster's data)")


def run(args: argparse.Namespace) -> int:
    problems = sweep(args.state_dir.resolve())
    for problem in problems:
        print(f"pykubelet down: {problem}", file=sys.stderr)
    if args.purge and not problems:
        shutil.rmtree(args.state_dir, ignore_errors=True)
    print("pykubelet: stopped", file=sys.stderr)
    return 1 if problems else 0
