"""`pykubelet supervise --state-dir DIR`: the stack's own supervisor, which `up` starts last and `down`
stops first; it starts again every daemon of DIR/supervised.json that dies (pykubelet.rig.supervisor)."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path

from pykubelet.rig.stack import DEFAULT_STATE_DIR
from pykubelet.rig.supervisor import Supervisor, load, supervised_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="the stack's state dir")


def run(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    if not load(state_dir):
        raise SystemExit(f"pykubelet supervise: nothing to supervise in {supervised_path(state_dir)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    supervisor = Supervisor(state_dir)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, supervisor.stop)
    supervisor.run()
    return 0
