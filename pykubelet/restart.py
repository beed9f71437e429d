"""`pykubelet restart COMPONENT`: stop one daemon of a running `up` stack on purpose and wait until its
supervisor started it again (`pykubelet restart proxy`, `apiserver-1`, `<node>/agent`); the names are
those of `<state>/supervised.json`, listed when an unknown one is asked for."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from pykubelet.rig.process import pid_alive
from pykubelet.rig.stack import DEFAULT_STATE_DIR
from pykubelet.rig.supervisor import load, request_restart, wait_restarted
from pykubelet.rig.sweep import supervisors_for


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("component", help="the daemon to restart (e.g. apiserver, proxy, dns, agent)")
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="the stack's state dir")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for it to be back")


def run(args: argparse.Namespace) -> int:
    state_dir = args.state_dir.resolve()
    daemons = {d.name: d for d in load(state_dir)}
    if not daemons:
        raise SystemExit(f"pykubelet restart: no stack started by `pykubelet up` in {state_dir}")
    daemon = daemons.get(args.component)
    if daemon is None:
        raise SystemExit(
            f"pykubelet restart: unknown component {args.component!r}; one of: {', '.join(sorted(daemons))}"
        )
    if not supervisors_for(state_dir):
        raise SystemExit(
            f"pykubelet restart: the stack's supervisor is not running; `pykubelet up --state-dir {state_dir}` "
            "starts the stack with it"
        )
    request_restart(state_dir, daemon.name)
    if daemon.pid and pid_alive(daemon.pid):
        try:
            if daemon.kill_group:
                os.killpg(daemon.pid, signal.SIGTERM)
            else:
                os.kill(daemon.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    pid = wait_restarted(state_dir, daemon.name, daemon.pid, args.timeout)
    print(f"{daemon.name} restarted (pid {pid})", file=sys.stderr)
    return 0
